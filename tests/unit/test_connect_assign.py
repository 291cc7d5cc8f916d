"""The Connect group leader's plan (strom.connect.group_member.assign): a task is never
given to a member while another runs it, and two rounds at most give out all the work,
evenly, the second moving nothing the first kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strom.connect.group_member import TaskId, assign

tasks = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 9)), unique=True, max_size=25)


@given(work=tasks, gone=tasks, members=st.integers(1, 5), data=st.data())
def test_plans_never_double_a_task_and_end_even_within_two_rounds(
    work: list[TaskId], gone: list[TaskId], members: int, data: st.DataObject
) -> None:
    pool = work + [task for task in gone if task not in work]  # gone: no longer in the work
    owners = data.draw(st.lists(st.integers(0, members), min_size=len(pool), max_size=len(pool)))
    running = {  # owner == members: nobody runs it
        f"m{n}": frozenset(t for t, owner in zip(pool, owners, strict=True) if owner == n)
        for n in range(members)
    }
    plan, second_round = assign(running, work)
    given_out = [task for member_tasks in plan.values() for task in member_tasks]
    assert len(given_out) == len(set(given_out))
    assert set(given_out) <= set(work)
    for member, member_tasks in plan.items():  # never to a member while another runs it
        for task in member_tasks:
            assert all(task not in running[other] for other in running if other != member)
    assert second_round or sorted(given_out) == sorted(work)

    after = {member: frozenset(member_tasks) for member, member_tasks in plan.items()}
    plan, second_round = assign(after, work)
    assert not second_round
    assert sorted(t for member_tasks in plan.values() for t in member_tasks) == sorted(work)
    sizes = [len(member_tasks) for member_tasks in plan.values()]
    assert max(sizes) - min(sizes) <= 1
    for member, member_tasks in plan.items():
        assert after[member] <= set(member_tasks)
