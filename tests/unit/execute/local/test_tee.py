"""ConsoleTee: raw bytes to the log, whole prefixed lines to the console."""

import os

from launcher.base.lines import tail_lines
from launcher.execute.local.tee import MAX_PENDING, ConsoleTee, console_key, console_tag


def test_lines_are_shown_whole_and_logged_raw(tmp_path):
    console_r, console_w = os.pipe()
    log = tmp_path / "out.log"
    tee = ConsoleTee(console_w)
    tee.add(3, "[rank3]: ", os.open(log, os.O_WRONLY | os.O_CREAT))
    for piece in (b"hel", b"lo\nwor", b"ld\n", b"tail without newline"):
        tee.feed(3, piece)
    tee.close(3)
    os.close(console_w)
    shown = os.read(console_r, 65536)
    assert shown == b"[rank3]: hello\n[rank3]: world\n[rank3]: tail without newline\n"
    assert log.read_bytes() == b"hello\nworld\ntail without newline"


def test_a_line_torch_tagged_gets_only_the_hosts_prefix(tmp_path):
    """docs/run.md: a line torch already prefixed ``[rankN]: `` is not prefixed twice, on several hosts too."""
    console_r, console_w = os.pipe()
    tee = ConsoleTee(console_w)
    tee.add(2, "[node1][rank2]: ", os.open(tmp_path / "l", os.O_WRONLY | os.O_CREAT), "[rank2]: ")
    tee.feed(2, b"[rank2]: Traceback\nplain\n[rank3]: another rank's tag\n")
    tee.close(2)
    os.close(console_w)
    assert os.read(console_r, 65536) == (b"[node1][rank2]: Traceback\n[node1][rank2]: plain\n"
                                         b"[node1][rank2]: [rank3]: another rank's tag\n")


def test_endless_line_is_shown_in_bounded_pieces(tmp_path):
    console = tmp_path / "console"
    console_fd = os.open(console, os.O_WRONLY | os.O_CREAT)
    tee = ConsoleTee(console_fd)
    tee.add(0, "[rank0]: ", os.open(tmp_path / "l", os.O_WRONLY | os.O_CREAT))
    for _ in range(3):
        tee.feed(0, b"\rprogress" * (MAX_PENDING // 9 + 1))
    assert console.read_bytes().count(b"[rank0]: ") == 3  # shown as it comes, never held back without bound
    tee.close(0)
    os.close(console_fd)


def test_tail_lines_reads_the_end_of_big_logs(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i}\n" for i in range(100000)))
    assert tail_lines(str(log), 3) == ["line 99997", "line 99998", "line 99999"]
    assert tail_lines(str(tmp_path / "absent"), 3) == []


def test_console_tag_is_torchs_or_torchruns_template():
    assert console_tag(3, 1, None) == "[rank3]: "
    assert console_tag(3, 1, "[${role_name}${local_rank}/${rank}]:") == "[default1/3]:"
    assert console_tag(3, 1, "${unknown} ${rank}") == "${unknown} 3"   # torchrun's safe_substitute


def test_mindspores_scheduler_has_its_own_tag_and_a_key_no_rank_has():
    """In an operator's scheduler pod the scheduler (no rank) is on the console: tagged as the scheduler, never
    as a rank, whatever torchrun template the pod has, and keyed apart from every rank."""
    assert console_tag(None, None, None) == console_tag(None, None, "[${rank}]") == "[scheduler]: "
    assert console_key(None) < 0 and console_key(0) == 0


def test_the_scheduler_is_shown_and_logged_like_a_rank(tmp_path):
    out, log = tmp_path / "console", tmp_path / "output.log"
    with open(out, "wb") as console_file:
        tee = ConsoleTee(console_file.fileno(), live=False)
        tee.add(console_key(None), console_tag(None, None, None), os.open(log, os.O_WRONLY | os.O_CREAT))
        tee.feed(console_key(None), b"serving the cluster\n")
        tee.close(console_key(None))
    assert out.read_text() == "[scheduler]: serving the cluster\n" and log.read_text() == "serving the cluster\n"
