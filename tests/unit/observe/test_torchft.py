"""The TorchFT quorum line of ``dlaunch status`` (observe/torchft.py), from the lighthouse's /status page."""

from launcher.observe.torchft import MEMBER, QUORUM_ID, lighthouse_of, quorum_line

# Captured from torchft 0.2.0's torchft_lighthouse during a two-group run (its templates/status.html), trimmed.
PAGE = """
Current quorum_id: 1 <br>
Next quorum status: New quorum not ready, only have 0 participants, need min_replicas 1

<h3>Previous Quorum</h3>
Previous quorum id: 1 <br>
Num participants: 2 <br>
<div>
<div class="member

">
  <b>train_ddp_0:208bfc07-0168-4eaf-992d-a75bfc4c13ad</b> <br/>
  Step: 54 <br/>
  Manager: http://vm:42071 <br/>
</div>
<div class="member
 recovering
">
  <b>train_ddp_1:7077eb1c-6a33-44c2-ac00-7dc5544ecd35</b> <br/>
  Step: 12 <br/>
</div>
"""


def test_the_quorum_and_its_members_are_read_from_the_lighthouse_page():
    assert QUORUM_ID.search(PAGE)[1] == "1"
    members = [(m[2].split(":")[0], int(m[3]), bool(m[1])) for m in MEMBER.finditer(PAGE)]
    assert members == [("train_ddp_0", 54, False), ("train_ddp_1", 12, True)]
    line = quorum_line({"lighthouse": "http://h:1", "quorum_id": 1,
                        "members": [{"replica": r, "step": s, "recovering": c} for r, s, c in members]})
    assert line == ("TorchFT quorum 1 (http://h:1): 2 replica group(s): train_ddp_0 step 54, "
                    "train_ddp_1 step 12 (recovering)")


def test_an_unreachable_lighthouse_is_said_and_the_lighthouse_is_found_in_any_plan():
    assert quorum_line({"lighthouse": "http://h:1", "quorum_id": None, "members": [],
                        "error": "not reachable (refused)"}) == "TorchFT lighthouse http://h:1: not reachable (refused)"
    plans = [{"ranks": [{"env": {}}]}, {"ranks": [{"env": {"TORCHFT_LIGHTHOUSE": "http://h:2"}}]}]
    assert lighthouse_of(plans) == "http://h:2" and lighthouse_of([{"ranks": []}]) is None
