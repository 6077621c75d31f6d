"""The contract between dlaunch and the processes it starts: every name both sides rely on, spelled once.

A rank reads these variables and writes these files; the launcher sets the one and reads the other. Both
sides import this module (it imports nothing), so a name changed here changes on both sides, and a
grep finds each name once. The exit codes are the ones dlaunch itself decides; a rank's own exit code
passes through unchanged (see ``launcher.execute.results``).
"""

from __future__ import annotations

from enum import Enum

# Variables dlaunch gives every process it starts (docs/run.md lists them with torchrun's and HCCL's).
RUN_ID_ENV = "DLAUNCH_RUN_ID"             # the run's id, the same on every rank and host
RUN_DIR_ENV = "DLAUNCH_RUN_DIR"           # the run directory
RANK_DIR_ENV = "DLAUNCH_RANK_DIR"         # this process's own directory inside it
CKPT_DIR_ENV = "DLAUNCH_CKPT_DIR"         # this rank's checkpoint directory (created, unique to run and rank)
RESUME_FROM_ENV = "DLAUNCH_RESUME_FROM"   # --resume: this rank's checkpoint file to load
RESUME_STEP_ENV = "DLAUNCH_RESUME_STEP"   # --resume: its step, EPOCH_STEP
LAUNCHER_ID_ENV = "DLAUNCH_LAUNCHER_ID"   # the launch's marker: the watchdog kills what carries it
LAUNCHER_IDS_ENV = "DLAUNCH_LAUNCHER_IDS"  # every enclosing launch's marker, outermost first, this one last:
                                           # a nested dlaunch's ranks stay marked for the outer watchdog too
JOB_SECRET_ENV = "DLAUNCH_JOB_SECRET"     # given to every host's dlaunch: the secret of a multi-host job
NOTICE_FILE_ENV = "DLAUNCH_NOTICE_FILE"   # --survivor-window: where a surviving rank is told a peer failed
NOTICE_SIGNAL_ENV = "DLAUNCH_NOTICE_SIGNAL"   # --notice-signal: the signal that comes with the notice
RAISE_ENV = "DLAUNCH_RAISE_FD"   # "FD:LAUNCHER_PID": where a Python rank's hook says it raised (local/raised.py)
MODULES_ENV = "DLAUNCH_MODULES_FILE"   # --warm-restarts: where a Python rank's hook lists the modules it imported
MEMORY_DIR_ENV = "DLAUNCH_MEMORY_DIR"       # --memory-ckpt: the rank's directory in memory for its own files
MEMORY_SLOTS_ENV = "DLAUNCH_MEMORY_SLOTS"   # --memory-ckpt: the rank's memory-tier slots (checkpoint/tier.py)
MEMORY_BUDGET_ENV = "DLAUNCH_MEMORY_BUDGET"   # --memory-budget: bytes of memory this rank may hold there
MEMORY_PERSIST_ENV = "DLAUNCH_MEMORY_PERSIST_EVERY"   # --memory-persist-every: steps that are multiples of N go to disk
ENV_PREFIX = "DLAUNCH_"                   # options from the environment: DLAUNCH_<OPTION>

# Files and directories inside a rank's directory.
CKPT_DIR = "ckpt"              # the checkpoint directory (CKPT_DIR_ENV points at it)
HEARTBEAT_FILE = "heartbeat"   # touched by launcher.heartbeat.beat(); the hang watch reads its mtime
MODULES_FILE = ("modules", "txt")   # modules.txt, modules.1.txt ...: the rank's imported modules, one a line
NOTICE_FILE = "notice.json"    # written by dlaunch when a peer failed (NOTICE_FILE_ENV names it)
NOTICE_SAVED_FILE = "notice.saved"   # written by the rank once it saved on the notice: its window may end
NOTICE_WATCHED_FILE = "notice.watched"   # written by a rank's first notice() of an attempt: the window waits for it
SCHEDULER_DIR = "scheduler"    # MindSpore's scheduler's own directory in the run directory


class Role(str, Enum):
    """What a process of a plan is. A ``str`` enum: plan.json and summary.json keep the plain words."""

    RANK = "rank"
    SCHEDULER = "scheduler"   # MindSpore's scheduler (--ms-scheduler): no rank, no device
    STORE = "store"           # a TorchFT replica group's store (--replica-groups): started again with its group
    LIGHTHOUSE = "lighthouse"   # TorchFT's lighthouse, which dlaunch starts when none is given

    def __str__(self) -> str:
        return self.value


class ExitCode:
    """The exit codes dlaunch decides itself, with their meaning (docs: README's "Exit codes")."""

    OK = 0
    FAILED = 1          # dlaunch itself could not go on (a full disk); validate-ranktable: a rule is broken
    USAGE = 2           # bad usage, config or rank table, found before anything started
    HOST_LOST = 69      # EX_UNAVAILABLE: a host of a multi-host job was lost (killed, silent, never arrived)
    STOPPED_BY_PEER = 75   # EX_TEMPFAIL: this host was stopped because a rank on another host failed
    UNHEALTHY = 92      # the health gate found this host unfit to start (a device, its network, storage, the
                        # user's checker): run the job on other hosts
    UNHEALTHY_RESCHEDULE = 192   # the same in an operator's pod: >= 128 is what the ExitCode restart policy of
                                 # ascend-operator and Kubeflow reschedules (kubeflow common's IsRetryableExitCode),
                                 # and 129-191 are deaths by a signal
    NO_PROGRESS = 93    # restarts stopped: attempts failed without progress, or a crash loop (ft_launcher's
                        # "decided, do not requeue"; a scheduler should not run the job again as it is)
    HUNG = 124          # a rank showed no sign of life for --hang-timeout (as coreutils timeout)
    NOT_EXECUTABLE = 126   # the program exists but could not be executed (as a shell says)
    NOT_FOUND = 127        # the program does not exist (as a shell says)
    INTERRUPTED = 130      # 128 + SIGINT: Ctrl-C before anything started
    BROKEN_PIPE = 141      # 128 + SIGPIPE: the reader of dlaunch's own output went away

    @staticmethod
    def of_signal(signum: int) -> int:
        """What a shell reports for a process that died of signal ``signum``."""
        return 128 + signum
