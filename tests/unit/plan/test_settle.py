"""plan/settle.py's own rules, without a launch."""

from launcher.contract import ExitCode
from launcher.plan.settle import unfit_exit_code


def test_an_unfit_host_exits_92_and_an_unfit_pod_192_for_its_operator_to_reschedule():
    assert unfit_exit_code({}) == ExitCode.UNHEALTHY == 92
    assert unfit_exit_code({"MINDX_TASK_ID": "4b1d2a7e"}) == ExitCode.UNHEALTHY_RESCHEDULE == 192
    kubeflow = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"}
    assert unfit_exit_code(kubeflow) == 192
