# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Container image references as the kubelet parses them (the distribution spec's reference grammar): a pod with a
reference it cannot parse, such as one with an uppercase repository, never starts (InvalidImageName).

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [ domain "/" ] path-component [ "/" path-component ]*     (at most 255 characters)
    domain     := domain-component [ "." domain-component ]* [ ":" port ]
    path-component := [a-z0-9]+ ( separator [a-z0-9]+ )*,  separator := "." | "_" | "__" | "-"+
    tag        := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
    digest     := algorithm ":" hex, with the length and case its algorithm takes (sha256: 64 lowercase hex)

Written here, not taken from a library: the grammar's own implementation is Go (distribution/reference); the Python
ports on PyPI are unmaintained. The pattern runs in the API server too (the CRDs), so it keeps to what RE2 and
Python's re both read (schema.compile_pattern). A domain that is an [IPv6] address, which the newest parser takes, is
refused: the copies of the grammar in container runtimes (containers/image, containerd) do not take it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from typing import Optional

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[A-Za-z0-9]|[A-Za-z0-9][-A-Za-z0-9]*[A-Za-z0-9])"
_DOMAIN = r"%s(?:\.%s)*(?::[0-9]+)?" % (_DOMAIN_COMPONENT, _DOMAIN_COMPONENT)
_NAME = r"(?:%s/)?%s(?:/%s)*" % (_DOMAIN, _PATH_COMPONENT, _PATH_COMPONENT)
_TAG = r"[A-Za-z0-9_][-A-Za-z0-9_.]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}"

# A whole reference, and a name alone (images.registry: the prefix of <registry>/<component>:<tag>).
IMAGE_PATTERN = r"^%s(?::%s)?(?:@%s)?$" % (_NAME, _TAG, _DIGEST)
IMAGE_HELP = "is not an image reference the kubelet takes ([registry/]repository[:tag][@digest]; the repository " \
             "in lowercase letters, digits and separators . _ __ -)"
REGISTRY_PATTERN = r"^%s$" % _NAME
REGISTRY_HELP = "is not a registry and repository prefix (like ghcr.io/my-org: the path in lowercase letters, " \
                "digits and separators . _ __ -)"
MAX_NAME = 255
# The longest reference the grammar allows: a name, a tag and a sha512 digest.
MAX_REFERENCE = MAX_NAME + 1 + 128 + 1 + len("sha512:") + 128
# digest algorithms the reference parser (opencontainers/go-digest) knows, and the hex length of each
_DIGEST_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}
# the components images.registry is joined with (fields.py, validate._image)
LONGEST_COMPONENT = "ansible-runner"


def _name_length_problem(name):
    if len(name) > MAX_NAME:
        return "its name (%d characters) is longer than the %d an image reference takes" % (len(name), MAX_NAME)
    return None


def image_problem(reference: object) -> Optional[str]:
    """Why the kubelet would refuse `reference` beyond its pattern (the name's length, the digest), or None."""
    if not isinstance(reference, str) or not re.match(IMAGE_PATTERN[:-1] + r"\Z", reference):
        return None                     # the pattern reports it
    name, _at, digest = reference.partition("@")
    last = name.rfind(":")
    if last > name.rfind("/"):
        name = name[:last]              # the tag
    if digest:
        algorithm, _colon, hex_digits = digest.partition(":")
        if algorithm not in _DIGEST_HEX:
            return "digest algorithm %r is not one the kubelet takes (%s)" % (algorithm, ", ".join(_DIGEST_HEX))
        if len(hex_digits) != _DIGEST_HEX[algorithm] or hex_digits != hex_digits.lower():
            return "a %s digest is %d lowercase hex digits" % (algorithm, _DIGEST_HEX[algorithm])
    return _name_length_problem(name)


def registry_problem(registry: object) -> Optional[str]:
    """Why <registry>/<component>:<tag> would be too long a name, or None."""
    if not isinstance(registry, str):
        return None
    return _name_length_problem("%s/%s" % (registry, LONGEST_COMPONENT))
