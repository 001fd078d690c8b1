"""The probe names config.py lists in its messages are the probes that exist, in their order."""
import pytest

from gcdoctor.config import PROBE_NAMES, UserError, parse_probes
from gcdoctor.probes import PROBES


def test_probe_names_match_the_probes():
    assert PROBE_NAMES == tuple(p.name for p in PROBES)


def test_empty_probe_list_names_every_probe():
    with pytest.raises(UserError) as err:
        parse_probes(" , ")
    assert str(err.value) == ("--probes ' , ': no probe named (available: sweep, allocator, optimizer, policies, "
                              "granularity, sharding, offload, jitter)")


def test_the_experiment_table_is_the_one_list():
    import dataclasses
    import subprocess
    import sys

    from gcdoctor.experiments import EXPERIMENTS
    from gcdoctor.facts import Facts
    from gcdoctor.report.console import TOPIC_TITLE
    from gcdoctor.trace.to_facts import NOT_IN_A_TRACE
    fields = {f.name for f in dataclasses.fields(Facts)}
    for e, p in zip(EXPERIMENTS, PROBES):
        assert p.name == e.name and e.facts in fields and TOPIC_TITLE[e.name] == e.title
        assert (e.facts in NOT_IN_A_TRACE) == (e.bare_trace is not None)
    code = ("import sys, gcdoctor.experiments, gcdoctor.config; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
