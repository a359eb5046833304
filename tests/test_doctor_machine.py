"""What the doctor's checks look at (autotune/cli/doctor_machine.py): the
driver's version, the device nodes, the target without a GPU."""
from autotune.cli import doctor_machine

DRIVER_580_OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                   "580.95.05  Release Build  (dvs-builder@U16)  Thu Sep 25\n")


def test_the_driver_version_is_read_from_the_kernel_modules_file(tmp_path):
    version_file = tmp_path / "version"
    version_file.write_text(DRIVER_580_OPEN)
    machine = doctor_machine.Machine(environ={}, driver_file=str(version_file),
                                     smi_driver=lambda: "575.51.03")
    assert doctor_machine.driver_version(machine) == ("580.95.05",
                                                      str(version_file))
    # Without the file: nvidia-smi; without either: nothing.
    machine.driver_file = str(tmp_path / "absent")
    assert doctor_machine.driver_version(machine) == ("575.51.03",
                                                      "nvidia-smi")
    machine.smi_driver = lambda: ""
    assert doctor_machine.driver_version(machine) == ("", "")


def test_the_device_nodes_are_the_nvidia_ones(tmp_path):
    for name in ("nvidia0", "nvidiactl", "null", "nvidia-uvm"):
        (tmp_path / name).write_text("")
    assert doctor_machine.nvidia_nodes(str(tmp_path)) == [
        "nvidia-uvm", "nvidia0", "nvidiactl"]
    assert doctor_machine.nvidia_nodes(str(tmp_path / "absent")) == []


def test_the_target_is_the_first_gpus_else_sm_90():
    assert doctor_machine.State().arch == 90
    assert not doctor_machine.State().gpu_here
    state = doctor_machine.State(gpus=[("NVIDIA A100", (8, 0)),
                                       ("NVIDIA H200", (9, 0))])
    assert state.arch == 80 and state.gpu_here


def test_a_machine_reads_this_process_by_default():
    machine = doctor_machine.Machine()
    assert machine.dev == "/dev" and machine.environ is not None
    assert not doctor_machine.Machine(environ={"TEST_TMPDIR": "/t"}
                                      ).in_bazel_test()
    assert doctor_machine.Machine(environ={"TEST_TMPDIR": "/t",
                                           "TEST_SRCDIR": "/s"}
                                  ).in_bazel_test()
