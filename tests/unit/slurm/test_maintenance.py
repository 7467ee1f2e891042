"""slurm/maintenance.py (pure parts): reading `scontrol show reservation`, the commands that make our reservation
cover the outdated workers for the window, and the window's phases; spec/window.py: the window's start. The
reservations themselves are made, used by slurmctld's scheduler and removed in tests/integration/test_rollout_real.py
(real slurmctld)."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.slurm import maintenance as mt
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmCommandError, SlurmOutputError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.window import (
    parse_start, parse_utc_text, start_problem, utc_text)

# As slurmctld 22.05 printed them here under TZ=UTC0 (an inactive one, then an active one with IGNORE_JOBS).
SHOWN = (
    "ReservationName=soperator-upgrade-cpu StartTime=2026-11-25T03:00:00 EndTime=2026-11-25T04:00:00 "
    "Duration=01:00:00 Nodes=cpu-[1-2] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=(null) "
    "Flags=MAINT,SPEC_NODES TRES=cpu=4 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE "
    "BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n"
    "ReservationName=r3 StartTime=2026-11-24T23:08:13 EndTime=2026-11-25T00:08:13 Duration=01:00:00 "
    "Nodes=cpu-[0-1] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=(null) Flags=MAINT,IGNORE_JOBS,SPEC_NODES "
    "TRES=cpu=4 Users=alice Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null) "
    "Watts=n/a MaxStartDelay=(null)\n")
START = parse_start("2026-11-25T03:00:00Z")
END = START + 3600
NAME = "soperator-upgrade-cpu"


def test_reservations_are_read_with_their_times_in_utc():
    found = mt.parse_reservations(SHOWN)
    ours = found[NAME]
    assert (ours.start, ours.end) == (START, END)
    assert ours.nodes == ("cpu-1", "cpu-2") and ours.flags == ("MAINT", "SPEC_NODES") and ours.state == "INACTIVE"
    assert ours.ours
    assert not found["r3"].ours         # MAINT, but another user's
    assert mt.parse_reservations("No reservations in the system\n") == {}


def test_a_reservation_we_cannot_read_is_an_error():
    with pytest.raises(SlurmOutputError, match="cannot read"):
        mt.parse_reservations("ReservationName=x StartTime=tomorrow EndTime=2026-11-25T04:00:00\n")
    with pytest.raises(SlurmOutputError, match="cannot read"):
        mt.parse_reservations("something else entirely\n")


def test_phases_of_the_window():
    assert mt.window_phase(START - 1, START, END) == mt.BEFORE
    assert mt.window_phase(START, START, END) == mt.OPEN
    assert mt.window_phase(END, START, END) == mt.OVER


def test_created_for_the_window_with_ignore_jobs_only_when_a_reserved_node_is_busy():
    action, commands = mt.reservation_commands(NAME, None, ["cpu-1", "cpu-2"], [], START, END, START - 600)
    assert action == mt.CREATED
    assert commands == [["scontrol", "create", "reservation", "ReservationName=" + NAME,
                         "StartTime=2026-11-25T03:00:00", "EndTime=2026-11-25T04:00:00", "Nodes=cpu-[1-2]",
                         "Flags=MAINT", "Users=root"]]
    _action, commands = mt.reservation_commands(NAME, None, ["cpu-1", "cpu-2"], ["cpu-2", "cpu-7"], START, END,
                                                START - 600)
    assert "Flags=MAINT,IGNORE_JOBS" in commands[0]
    # inside the window it starts now: a start in the past is refused
    _action, commands = mt.reservation_commands(NAME, None, ["cpu-1"], [], START, END, START + 5)
    assert "StartTime=now" in commands[0] and "EndTime=2026-11-25T04:00:00" in commands[0]


def test_an_unchanged_reservation_costs_no_command():
    ours = mt.parse_reservations(SHOWN)[NAME]
    assert mt.reservation_commands(NAME, ours, ["cpu-1", "cpu-2"], [], START, END, START - 600) == (mt.UNCHANGED, [])
    # an active one keeps its start: Slurm cannot move it, and the window is open anyway
    ours.state = "ACTIVE"
    assert mt.reservation_commands(NAME, ours, ["cpu-1", "cpu-2"], [], START - 60, END, START) == (mt.UNCHANGED, [])


def test_updated_to_the_outdated_nodes_and_the_window():
    ours = mt.parse_reservations(SHOWN)[NAME]
    update = ["scontrol", "update", "reservation", "ReservationName=" + NAME]
    # a busy node joins: IGNORE_JOBS first (Slurm refuses busy nodes otherwise), then the nodes
    action, commands = mt.reservation_commands(NAME, ours, ["cpu-0", "cpu-1", "cpu-2"], ["cpu-0"], START, END,
                                               START - 600)
    assert action == mt.UPDATED
    assert commands == [update + ["Flags+=IGNORE_JOBS"], update + ["Nodes=cpu-[0-2]"]]
    # any change over a busy reserved node needs the flag first (Slurm: "Requested nodes are busy")...
    _action, commands = mt.reservation_commands(NAME, ours, ["cpu-1"], ["cpu-1"], START, END, START - 600)
    assert commands == [update + ["Flags+=IGNORE_JOBS"], update + ["Nodes=cpu-1"]]
    _action, commands = mt.reservation_commands(NAME, ours, ["cpu-1"], [], START, END, START - 600)
    assert commands == [update + ["Nodes=cpu-1"]]
    # ...and no change needs no flag
    assert mt.reservation_commands(NAME, ours, ["cpu-1", "cpu-2"], ["cpu-1"], START, END, START - 600) == (
        mt.UNCHANGED, [])
    # the window opened earlier than the inactive reservation starts: it starts now
    _action, commands = mt.reservation_commands(NAME, ours, ["cpu-1", "cpu-2"], [], START - 3600, END, START - 60)
    assert commands == [update + ["StartTime=now"]]
    # the window moved
    _action, commands = mt.reservation_commands(NAME, ours, ["cpu-1", "cpu-2"], [], START + 3600, END + 7200,
                                                START - 600)
    assert commands == [update + ["StartTime=2026-11-25T04:00:00", "EndTime=2026-11-25T06:00:00"]]


def test_removed_when_no_node_is_left_and_absent_stays_absent():
    ours = mt.parse_reservations(SHOWN)[NAME]
    assert mt.reservation_commands(NAME, ours, [], [], START, END, START + 60) == (
        mt.REMOVED, [["scontrol", "delete", "reservation", NAME]])
    assert mt.reservation_commands(NAME, None, [], [], START, END, START + 60) == (mt.ABSENT, [])


def test_a_reservation_of_our_name_that_is_not_ours_is_never_touched():
    theirs = mt.parse_reservations(SHOWN.replace("Users=root", "Users=bob"))[NAME]
    for nodes in (["cpu-1"], []):
        with pytest.raises(SlurmCommandError, match="is not ours .*users bob.* left alone"):
            mt.reservation_commands(NAME, theirs, nodes, [], START, END, START - 600)


def test_acted():
    assert mt.acted({"action": mt.CREATED}) and mt.acted({"action": mt.REMOVED}) and mt.acted({"action": mt.UPDATED})
    assert not mt.acted({"action": mt.UNCHANGED}) and not mt.acted(None)


@pytest.mark.parametrize("text, epoch", [
    ("2026-11-25T03:00:00Z", START),
    ("2026-11-25T03:00Z", START),
    ("2026-11-25T04:30:00+01:30", START),
    ("2026-11-24T22:00:00-05:00", START),
])
def test_window_start_with_its_offset(text, epoch):
    assert parse_start(text) == epoch and start_problem(text) is None


@pytest.mark.parametrize("text, why", [
    ("2026-11-25T03:00:00", "RFC 3339"),           # no offset: whose local time?
    ("2026-11-25 03:00:00Z", "RFC 3339"),
    ("2026-02-30T03:00:00Z", "not a valid date"),
    ("2026-11-25T24:00:00Z", "not a valid date"),
    ("2026-11-25T03:00:00+25:00", "invalid offset"),
])
def test_window_start_refused(text, why):
    with pytest.raises(ValueError, match=why):
        parse_start(text)


def test_utc_text_round_trip():
    assert utc_text(START) == "2026-11-25T03:00:00" and parse_utc_text(utc_text(START)) == START
