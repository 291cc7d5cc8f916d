"""Put first on PYTHONPATH of the processes the tests start (tests/conftest.py), this
stands in for hypothesis, a test dependency, so that those processes find it missing,
as they would where Strom is installed without its test extra: kio imports hypothesis
when it can, and that import was a third of every broker's and tool's start here."""

raise ImportError("hypothesis is left out of the processes the tests start")
