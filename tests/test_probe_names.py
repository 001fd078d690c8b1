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
