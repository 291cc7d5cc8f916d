"""Old message formats: the cost per record of converting, in-process.

Down-conversion (Fetch v0-3): v2 batches of ``--records`` records (key 10 B, value
``--value-size`` B, one header) are converted to magic 0 and magic 1 message sets with
``down_convert``, per codec (none, gzip, snappy, lz4). Up-conversion (Produce v0-2): the
same records as magic 0 and magic 1 message sets (uncompressed, and one gzip wrapper)
are converted to one v2 batch with ``up_convert``. Prints µs per record and records/s.

The v2 paths are not touched: a Fetch v4+ or Produce v3+ runs the same code as before
(the fetch handler checks the request version once per response, and converts nothing
when it is 4 or more; the produce handler converts only where a v2 batch's validation
already failed on a magic 0/1 byte), so v4+ fetch throughput is the figure
``bench/produce_consume.py`` prints, unchanged.

    .venv/bin/python bench/down_conversion.py [--records 100] [--value-size 100]
"""

from __future__ import annotations

import argparse
import time
from functools import partial

from strom.protocol.message_sets import down_convert, up_convert
from strom.protocol.records import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, build_batch

CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4}


def _per_record(run, records: int, seconds: float) -> float:
    """µs per record of ``run()`` (which converts ``records`` records), repeated for
    about ``seconds`` after one warm-up call."""
    run()
    rounds = 0
    started = time.perf_counter()
    while True:
        run()
        rounds += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return elapsed / (rounds * records) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100, help="records per batch")
    parser.add_argument("--batches", type=int, default=10, help="batches per conversion")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=1.0, help="time per figure")
    args = parser.parse_args()
    n = args.records * args.batches
    now = int(time.time() * 1000)
    rows = [
        (b"key-%06d" % i, bytes([65 + i % 26]) * args.value_size, [("h", b"x")])
        for i in range(args.records)
    ]

    def v2_batches(codec: int) -> bytes:
        return b"".join(
            build_batch(rows, base_offset=b * args.records, base_timestamp=now, codec=codec)
            for b in range(args.batches)
        )

    print(f"{n} records of {args.value_size} B in {args.batches} batches of {args.records}")
    print(f"{'conversion':<34} {'µs/record':>10} {'records/s':>12}")

    def line(name: str, us: float) -> None:
        print(f"{name:<34} {us:>10.2f} {1e6 / us:>12,.0f}")

    for name, codec in CODECS.items():
        data = v2_batches(codec)
        for magic in (0, 1):
            us = _per_record(partial(down_convert, data, magic, 0), n, args.seconds)
            line(f"down v2 {name} -> magic {magic}", us)
    plain = v2_batches(CODEC_NONE)
    one_gzip_batch = build_batch(rows, base_timestamp=now, codec=CODEC_GZIP)
    for magic in (0, 1):
        message_set = down_convert(plain, magic, 0)
        us = _per_record(partial(up_convert, message_set, log_append_time=False), n, args.seconds)
        line(f"up magic {magic} none -> v2", us)
        wrapper = down_convert(one_gzip_batch, magic, 0)
        us = _per_record(
            partial(up_convert, wrapper, log_append_time=False), args.records, args.seconds
        )
        line(f"up magic {magic} gzip wrapper -> v2", us)


if __name__ == "__main__":
    main()
