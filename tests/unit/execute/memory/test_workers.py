"""workers: plain LocalWorkers without --memory-ckpt, kept by a MemoryKeeper with it."""

from types import SimpleNamespace

from launcher.execute.local.workers import LocalWorkers
from launcher.execute.memory.workers import MemoryWorkers, workers_of
from launcher.plan.make import Policy


def test_the_keeper_is_there_only_with_the_memory_tier():
    assert workers_of(SimpleNamespace(policy=Policy(), resume_from=None)) is LocalWorkers
    made = workers_of(SimpleNamespace(policy=Policy(memory_ckpt=True, memory_root="/x", memory_budget=5),
                                      resume_from="/runs/a"))
    assert made.func is MemoryWorkers and issubclass(MemoryWorkers, LocalWorkers)
    keeper = made.keywords["keeper"]
    assert (keeper.root, keeper.budget, keeper.resume_from) == ("/x", 5, "/runs/a")
