from launcher.base.exposition import Family, labels, number, render


def test_label_values_are_escaped_as_the_format_says():
    assert labels(host='a"b\\c\nd', rank=3) == 'host="a\\"b\\\\c\\nd",rank="3"'


def test_numbers_are_spelled_as_prometheus_reads_them():
    assert [number(v) for v in (3, True, 0.25, float("nan"), float("inf"), float("-inf"))] == \
        ["3", "1", "0.25", "NaN", "+Inf", "-Inf"]


def test_a_family_is_help_type_then_its_samples_and_an_empty_one_is_left_out():
    ranks = Family("dlaunch_ranks", "gauge", "Ranks by state.")
    ranks.add(labels(host="h", state="running"), 3)
    ranks.add(labels(host="h", state="hung"), None)   # not known: not said
    bare = Family("dlaunch_straggler_threshold", "gauge", "Threshold.")
    bare.add("", 0.75)
    empty = Family("dlaunch_checkpoint_step", "gauge", "Step.")
    assert render([ranks, empty, bare]).decode() == (
        "# HELP dlaunch_ranks Ranks by state.\n# TYPE dlaunch_ranks gauge\n"
        'dlaunch_ranks{host="h",state="running"} 3\n'
        "# HELP dlaunch_straggler_threshold Threshold.\n# TYPE dlaunch_straggler_threshold gauge\n"
        "dlaunch_straggler_threshold 0.75\n")
