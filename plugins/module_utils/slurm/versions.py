# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm versions of images, and which version changes Slurm supports. Pure: no I/O.

Where a version comes from: our image tags are ``<Slurm version>-<collection version>`` (images/build.py, e.g.
``26.05.5-0.1.0``); a tag that does not start with ``YY.MM.micro`` says no version (``latest``, a digest, a tag of
someone else's). The live version of a component is what its live StatefulSet and pods run.

What Slurm supports (https://slurm.schedmd.com/upgrades.html, "Compatibility Window" and "Reverting an Upgrade"):

* a release accepts state, database records and RPCs of the previous two major releases; since 24.11, of the
  previous three (23.02 <- 22.05, 21.08; 24.05 <- 23.11, 23.02; 24.11 <- 24.05, 23.11, 23.02; 25.11 <- 25.05,
  24.11, 24.05; 26.05 therefore <- 25.11, 25.05, 24.11). "Upgrades from incompatible versions will fail immediately
  upon startup" and lose running jobs and accounting: a longer jump goes in steps;
* a downgrade is not supported once a daemon of the newer version has started (it converts its state files and the
  database): refused here, maintenance releases included;
* order: back up (StateSaveLocation, the accounting database), slurmdbd, slurmctld, slurmd, then login nodes and
  client commands; slurmdbd must be at the same or a newer major release than slurmctld.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from dataclasses import dataclass
from typing import Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError

# Major releases before the 6-month cycle (they do not follow a rule); from 24.05 on: every May and November.
_OLD_RELEASES = ((20, 2), (20, 11), (21, 8), (22, 5), (23, 2), (23, 11))
_SIX_MONTHLY_SINCE = (24, 5)
# 24.11 widened the window from two prior major releases to three.
_THREE_PRIOR_SINCE = (24, 11)

_TAG = re.compile(r"^(\d{2})\.(\d{2})\.(\d+)(?:$|[-_+.])")

# Components in Slurm's upgrade order, and what runs in them.
ACCOUNTING, CONTROLLER, WORKER, LOGIN = "slurmdbd", "slurmctld", "slurmd", "login"
ORDER = (ACCOUNTING, CONTROLLER, WORKER, LOGIN)
# The daemons that convert what they keep (the accounting database, StateSaveLocation) to their version on start.
CONVERTS_STATE = (ACCOUNTING, CONTROLLER)


class VersionError(SoperatorError):
    """A version change Slurm does not support, or one that cannot be judged; nothing was changed."""


@dataclass(frozen=True, order=True)
class Version:
    year: int
    month: int
    micro: int

    @property
    def major(self):
        return (self.year, self.month)

    def __str__(self):
        return "%02d.%02d.%d" % (self.year, self.month, self.micro)


def major_str(major):
    return "%02d.%02d" % major


def image_tag(image):
    """The tag of an image reference, or None (no tag, or pinned by digest only)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    return last.rsplit(":", 1)[1]


def parse_image(image):
    """The Slurm Version an image's tag says, or None when it says none (or names no Slurm release)."""
    if image is None:
        return None
    tag = image_tag(image)
    match = _TAG.match(tag or "")
    if not match:
        return None
    version = Version(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    return version if is_release(version.major) else None


def is_release(major):
    if major in _OLD_RELEASES:
        return True
    return major >= _SIX_MONTHLY_SINCE and major[1] in (5, 11)


def previous_releases(major, count):
    """The `count` major releases before `major`, newest first."""
    out = []
    current = major
    while len(out) < count:
        if current > _SIX_MONTHLY_SINCE:
            current = (current[0], 5) if current[1] == 11 else (current[0] - 1, 11)
        else:
            older = [r for r in _OLD_RELEASES if r < current]
            if not older:
                break
            current = older[-1]
        out.append(current)
    return out


def accepted_releases(major):
    """The prior major releases a release upgrades from (its compatibility window), newest first."""
    return previous_releases(major, 3 if major >= _THREE_PRIOR_SINCE else 2)


def upgrade_path(source, target):
    """The major releases to go through from `source` to `target`, each within the window of the next, as text."""
    steps = [target]
    while source not in accepted_releases(steps[0]) and steps[0] != source:
        window = [r for r in accepted_releases(steps[0]) if r >= source]
        if not window:
            break
        steps.insert(0, window[-1])  # the oldest release the step accepts: fewest steps
    return " -> ".join([major_str(source)] + [major_str(s) for s in steps if s != source])


@dataclass(frozen=True)
class Component:
    """One Slurm component of a run. `applied`: the image of its live StatefulSet (what we applied last; None when
    it does not exist yet); `running`: the images its pods run (older ones while a roll is under way); `desired`:
    what the spec says, set by the spec field `field` (a path, as errors name it)."""
    name: str                   # ACCOUNTING | CONTROLLER | WORKER | LOGIN
    object_name: str            # its StatefulSet
    field: str
    desired: str
    applied: Optional[str] = None
    running: Tuple[str, ...] = ()

    @property
    def desired_version(self):
        return parse_image(self.desired)

    @property
    def live(self):
        """Every image that runs or was applied, once each."""
        return tuple(sorted(set(([self.applied] if self.applied else []) + list(self.running))))

    @property
    def live_versions(self):
        return [parse_image(i) for i in self.live]

    @property
    def moves(self):
        """This run changes its Slurm version: the applied image differs from the spec's and names another version
        (or one of the two names none). A roll of pods onto what was applied earlier is not a move."""
        if self.applied is None or self.applied == self.desired:
            return False
        target, current = self.desired_version, parse_image(self.applied)
        if target is None or current is None:
            # Unknown: slurmdbd and slurmctld convert the database and their state when they start, so that is
            # judged (refused unless allowed); slurmd and login keep no such state - a plain image change to them.
            return self.name in CONVERTS_STATE
        return target != current

    @property
    def known(self):
        return self.desired_version is not None and all(v is not None for v in self.live_versions)


@dataclass(frozen=True)
class Plan:
    """What a run's Slurm version change needs: the components that move, in Slurm's order."""
    moving: Tuple[Component, ...]
    unverified: bool            # some image said no version; the user allowed it

    @property
    def versions(self):
        """{component/object: "from -> to"} of what moves."""
        out = {}
        for comp in self.moving:
            froms = sorted(set(_text(v, i) for v, i in zip(comp.live_versions, comp.live)))
            out["%s/%s" % (comp.name, comp.object_name)] = "%s -> %s" % (
                ", ".join(froms), _text(comp.desired_version, comp.desired))
        return out


def _text(version, image):
    return str(version) if version is not None else "%s (no version in its tag)" % image


def plan(components, allow_unversioned=False):
    """The Plan of `components` (every Slurm component of the run, moving or not), or VersionError naming the
    versions, the field and the supported path. Plan with nothing moving when no Slurm version changes."""
    moving = [c for c in components if c.moves]
    if not moving:
        return Plan((), False)
    errors = []
    unknown = [c for c in moving if not c.known]
    if unknown and not allow_unversioned:
        for comp in unknown:
            errors.append(
                "%s: the Slurm version of %s %s cannot be told from its image (%s); the tag must start with the Slurm "
                "version (<YY.MM.micro>-..., as `make images` tags them). A wrong guess could convert the accounting "
                "database or slurmctld's state with an unsupported version. Use a versioned tag, or set "
                "allow_unversioned_images=true to upgrade anyway in Slurm's order (database dump and slurmctld state "
                "saved first), without the version check" % (
                    comp.field, comp.name, comp.object_name,
                    "; ".join("%s -> %s" % (_image_text(i), _image_text(comp.desired)) for i in comp.live)))
    # Every version that runs anywhere must be within the window of each version a component moves to.
    running = [(c, v) for c in components for v in c.live_versions if v is not None]
    too_old = {}                # target major -> ([fields], [what runs outside its window])
    for comp in moving:
        target = comp.desired_version
        if target is None:
            continue
        for other, version in running:
            if other.name == comp.name and other.object_name == comp.object_name and version > target:
                errors.append(
                    "%s: %s %s would go from Slurm %s down to %s; Slurm does not support a downgrade once a newer "
                    "daemon has started (it converted its state and the database). Keep %s or newer" % (
                        comp.field, comp.name, comp.object_name, version, target, version))
            elif version.major < target.major and version.major not in accepted_releases(target.major):
                fields, offenders = too_old.setdefault(target.major, ([], []))
                fields.append(comp.field)
                offenders.append((version, "%s %s runs %s" % (other.name, other.object_name, version)))
    for target, (fields, offenders) in sorted(too_old.items()):
        oldest = min(v for v, _text in offenders)
        errors.append(
            "%s: Slurm %s accepts only %s (https://slurm.schedmd.com/upgrades.html), but %s. Upgrade in steps, each "
            "finished on every component: %s" % (
                ", ".join(_unique(fields)), major_str(target),
                ", ".join(major_str(m) for m in accepted_releases(target)) or "no earlier release",
                ", ".join(_unique(t for _v, t in offenders)), upgrade_path(oldest.major, target)))
    errors += _order_errors(components)
    if errors:
        raise VersionError("refused Slurm version change, nothing was changed: " + "; ".join(_unique(errors)))
    order = dict((name, i) for i, name in enumerate(ORDER))
    return Plan(tuple(sorted(moving, key=lambda c: order[c.name])), bool(unknown))


def _order_errors(components):
    """slurmdbd at the same or a newer major release than slurmctld, slurmctld than slurmd and login (Slurm's
    order: an older daemon cannot read what a newer one sends)."""
    errors = []
    by_name = {}
    for comp in components:
        if comp.desired_version is not None:
            by_name.setdefault(comp.name, []).append(comp)
    for newer, older_ones in ((ACCOUNTING, (CONTROLLER,)), (CONTROLLER, (WORKER, LOGIN))):
        for high in by_name.get(newer, []):
            for name in older_ones:
                for low in by_name.get(name, []):
                    if low.desired_version.major > high.desired_version.major:
                        errors.append(
                            "%s: %s %s would run Slurm %s, newer than %s %s (%s); %s must be at the same or a newer "
                            "major release" % (low.field, low.name, low.object_name, low.desired_version,
                                               high.name, high.object_name, high.desired_version, high.name))
    return errors


def _image_text(image):
    version = parse_image(image)
    return "%s (Slurm %s)" % (image, version) if version else "%s (no version)" % image


def _unique(items):
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out
