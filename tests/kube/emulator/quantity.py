"""resource.Quantity canonical form, as the real server stores built-in quantities ("1000m" -> "1", "1024Mi" -> "1Gi").

Our own implementation of the rules of apimachinery's Quantity.String(): the suffix family of the input is kept
(binary Ki..Ei, decimal n..E, or an exponent), the value is rounded up to a whole nano, and the mantissa is the
smallest integer with an exponent that is a multiple of 3 (decimal) or of 1024 (binary).
"""
import re
from decimal import Decimal, ROUND_CEILING, localcontext

QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = dict((v, k) for k, v in _DECIMAL.items())
_BINARY_SUFFIX = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


class QuantityError(ValueError):
    pass


def parse(text):
    """-> (Decimal value, format) where format is 'BinarySI', 'DecimalSI' or 'DecimalExponent'."""
    if isinstance(text, bool):
        raise QuantityError(ERROR)
    if isinstance(text, int):
        return Decimal(text), "DecimalSI"
    if isinstance(text, float):
        return Decimal(repr(text)), "DecimalSI"
    if not isinstance(text, str):
        raise QuantityError(ERROR)
    m = QUANTITY_RE.match(text.strip()) if text == text.strip() else None
    if not m:
        raise QuantityError(ERROR)
    number, suffix = m.group(1), m.group(2)
    if number.count(".") > 1 or number.strip("+-") in (".", ""):
        raise QuantityError(ERROR)
    with localcontext() as ctx:
        ctx.prec = 80
        value = Decimal(number)
        if suffix in _BINARY:
            return value * (Decimal(1024) ** _BINARY[suffix]), "BinarySI"
        if suffix in _DECIMAL:
            return value.scaleb(_DECIMAL[suffix]), "DecimalSI"
        em = re.match(r"^[eE]([-+]?[0-9]+)$", suffix)
        if em:
            return value.scaleb(int(em.group(1))), "DecimalExponent"
    raise QuantityError(ERROR)


def _round_up_nano(value):
    with localcontext() as ctx:
        ctx.prec = 80
        return value.quantize(Decimal("1e-9"), rounding=ROUND_CEILING) if value.as_tuple().exponent < -9 else value


def canonical(text):
    """The string the real server stores for this quantity."""
    value, fmt = parse(text)
    value = _round_up_nano(value)
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if fmt == "BinarySI" and value < 1024:
        fmt = "DecimalSI"  # small binary values print in decimal, as the real server does
    if fmt == "BinarySI" and value == value.to_integral_value():
        n, power = int(value), 0
        while power < 6 and n % 1024 == 0:
            n //= 1024
            power += 1
        return "%s%d%s" % (sign, n, _BINARY_SUFFIX[power])
    # Decimal: integer mantissa, exponent a multiple of 3 between nano and exa, mantissa as small as possible.
    exponent = -9
    mantissa = int(value.scaleb(9))
    while exponent < 18 and mantissa % 1000 == 0:
        mantissa //= 1000
        exponent += 3
    if fmt == "DecimalExponent":
        return "%s%d%s" % (sign, mantissa, "e%d" % exponent if exponent else "")
    return "%s%d%s" % (sign, mantissa, _DECIMAL_SUFFIX[exponent])
