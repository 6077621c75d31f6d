"""This machine and its scheduler: the devices it allows and shows, the pod an operator started, the driver's
``hccn_tool``/``npu-smi`` runners."""
