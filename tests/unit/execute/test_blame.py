from launcher.execute.blame import RankState, blame_line, header, main_thread, read_state, stopped_first

WAITING = '''Process 27781: /venv/bin/python -u t.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 27781 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:3252)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    <module> (t.py:8)
Thread 27790 (idle): "Thread-1"
    run (threading.py:975)
'''
SLEEPING = '''Process 17788: /venv/bin/python /tmp/hang.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 17788 (idle)
    <module> (hang.py:6)
Thread 17799 (idle)
    barrier (torch/distributed/distributed_c10d.py:4000)
'''


def state(rank, text, sign=100.0, step=None):
    return read_state(rank, f"h{rank // 4}", header(sign, step) + text)


def test_the_header_and_the_main_thread_are_read_back():
    waiting = state(0, WAITING, 123.5, 49)
    assert (waiting.last_sign, waiting.last_step, waiting.in_collective) == (123.5, 49, True)
    # py-spy names no thread of a process that never imported threading: the thread with the process's id
    assert state(1, SLEEPING).in_collective is False
    assert "barrier" not in main_thread(SLEEPING)
    assert state(2, "no stack could be taken: py-spy is not installed\n").in_collective is None
    assert read_state(3, "h", WAITING).last_sign is None   # no header: still read
    caught_leaving = 'Process 12620: python t.py\n\nThread 12620 (active+gil): "MainThread"\n'
    assert state(4, caught_leaving).in_collective is None   # no frame: neither waiting nor not


def test_the_rank_outside_the_collective_stopped_first():
    states = [state(0, WAITING, 100.0), state(1, WAITING, 99.0), state(6, SLEEPING, 100.2), state(7, WAITING)]
    culprit, why = stopped_first(states)
    assert culprit.rank == 6 and why == "its stack is in no collective while the 3 others wait in one"
    assert blame_line((culprit, why), hosts=2).startswith("rank 6 on host h1 stopped first:")


def test_a_rank_behind_in_steps_counts_only_when_its_last_sign_is_older_too():
    together = [RankState(0, "h", 100.0, 50, None), RankState(1, "h", 100.1, 45, None)]
    assert stopped_first(together) is None   # a heartbeat's step is a second late: no blame
    behind = [RankState(0, "h", 100.0, 50, None), RankState(1, "h", 98.0, 45, None)]
    culprit, why = stopped_first(behind)
    assert culprit.rank == 1 and why == "its last step is 45, others reached 50"


def test_with_no_stack_and_no_step_the_oldest_sign_of_life_decides_past_a_margin():
    assert stopped_first([RankState(0, "h", 100.0, None, None), RankState(1, "h", 100.3, None, None)]) is None
    culprit, why = stopped_first([RankState(0, "h", 100.0, None, None), RankState(1, "h", 97.0, None, None)])
    assert culprit.rank == 1 and "3.0 s older" in why
    assert blame_line(None).startswith("no rank stands out")


# a DDP rank waiting for a peer: the reducer's all-reduce runs inside autograd's engine, no torch.distributed frame
# (py-spy's dump of tests/programs/megatron_shaped.py's rank 0 while rank 1 slept at its stop)
IN_BACKWARD = '''Process 12584: /venv/bin/python megatron_shaped.py --train-iters 40
Python v3.11.7 (/usr/bin/python3.11)

Thread 12584 (idle): "MainThread"
    _engine_run_backward (torch/autograd/graph.py:979)
    backward (torch/autograd/__init__.py:395)
    Tensor.backward (torch/_tensor.py:623)
    main (megatron_shaped.py:79)
    <module> (megatron_shaped.py:105)
'''
STOPPED = '''Process 12585: /venv/bin/python megatron_shaped.py --train-iters 40
Python v3.11.7 (/usr/bin/python3.11)

Thread 12585 (idle): "MainThread"
    main (megatron_shaped.py:75)
    <module> (megatron_shaped.py:105)
'''


def test_a_ddp_rank_waiting_in_backward_waits_in_a_collective():
    """DDP (and FSDP, Megatron's DDP) all-reduce gradients inside backward: the rank that waits there is not the
    one that stopped, though it prints nothing and its last sign of life is the older (it was named)."""
    assert state(0, IN_BACKWARD).in_collective is True
    culprit, why = stopped_first([state(0, IN_BACKWARD, 95.0), state(1, STOPPED, 100.0, 24)])
    assert culprit.rank == 1 and why == "its stack is in no collective while the other rank waits in one"


def test_a_rank_that_reports_no_steps_is_not_blamed_for_printing_nothing():
    """Megatron prints on the last rank only: the others' last sign of life is old whatever happens. Without
    stacks that tell, the oldest sign of life is compared among the ranks that report steps only."""
    quiet, printing = RankState(0, "h", 90.0, None, None), RankState(1, "h", 100.0, 24, None)
    assert stopped_first([quiet, printing]) is None
    culprit, _ = stopped_first([quiet, printing, RankState(2, "h", 97.0, 24, None)])
    assert culprit.rank == 2
