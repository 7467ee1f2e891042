"""API errors as the real server reports them: `kind: Status` bodies, field errors formatted like Go's field.Error."""
import json

REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
    406: "NotAcceptable", 409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
    429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}


class ApiError(Exception):
    """An error response. `details` is the Status.details dict (name, group, kind, causes...)."""

    def __init__(self, code, reason=None, message="", details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason if reason is not None else REASONS.get(code, "")
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self):
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        if not body["reason"]:
            del body["reason"]
        return body


class Raw(str):
    """A value printed as is in a field error (e.g. the real server's `0x0` for an unset resourceVersion)."""


def go_repr(value):
    """%v / %#v-ish rendering used in field error messages: strings quoted, numbers bare."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class FieldError:
    """One field.Error: `type` is Required, Invalid, NotSupported, Forbidden, TooLong, TooMany, Duplicate, NotFound."""

    CAUSE = {"Required": "FieldValueRequired", "Invalid": "FieldValueInvalid", "NotSupported": "FieldValueNotSupported",
             "Forbidden": "FieldValueForbidden", "TooLong": "FieldValueTooLong", "TooMany": "FieldValueTooMany",
             "Duplicate": "FieldValueDuplicate", "NotFound": "FieldValueNotFound",
             "TypeInvalid": "FieldValueTypeInvalid"}

    def __init__(self, type_, field, value=None, detail="", supported=None):
        self.type = type_
        self.field = field
        self.value = value
        self.detail = detail
        self.supported = supported

    def body(self):
        t = self.type
        if t == "Required":
            text = "Required value"
        elif t == "Invalid":
            text = "Invalid value: %s" % go_repr(self.value)
        elif t == "TypeInvalid":
            text = "Invalid value: %s" % go_repr(self.value)
        elif t == "NotSupported":
            text = "Unsupported value: %s" % go_repr(self.value)
            if self.supported:
                self.detail = "supported values: " + ", ".join(go_repr(s) for s in self.supported)
        elif t == "Forbidden":
            text = "Forbidden"
        elif t == "TooLong":
            text = "Too long"
        elif t == "TooMany":
            text = "Too many: %s" % go_repr(self.value)
        elif t == "Duplicate":
            text = "Duplicate value: %s" % go_repr(self.value)
        elif t == "NotFound":
            text = "Not found: %s" % go_repr(self.value)
        else:
            text = t
        if self.detail:
            text += ": " + self.detail
        return text

    def __str__(self):
        return "%s: %s" % (self.field, self.body()) if self.field else self.body()

    def cause(self):
        return {"reason": self.CAUSE.get(self.type, "FieldValueInvalid"), "message": self.body(), "field": self.field}


def required(field, detail=""):
    return FieldError("Required", field, detail=detail)


def invalid(field, value, detail=""):
    return FieldError("Invalid", field, value, detail)


def forbidden(field, detail):
    return FieldError("Forbidden", field, detail=detail)


def not_supported(field, value, supported):
    return FieldError("NotSupported", field, value, supported=list(supported))


def too_long(field, limit):
    return FieldError("TooLong", field, detail="may not be more than %d bytes" % limit)


def invalid_error(kind, group, name, errors):
    """422 Invalid: `Kind.group "name" is invalid: [a: ..., b: ...]` (no brackets for one error)."""
    qualified = "%s.%s" % (kind, group) if group else kind
    texts = [str(e) for e in errors]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (qualified, name, joined),
                    {"name": name, "group": group, "kind": kind, "causes": [e.cause() for e in errors]})


def _resource_ref(resource, group):
    return "%s.%s" % (resource, group) if group else resource


def not_found(resource, group, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (_resource_ref(resource, group), name),
                    {"name": name, "group": group, "kind": resource})


def already_exists(resource, group, name):
    return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (_resource_ref(resource, group), name),
                    {"name": name, "group": group, "kind": resource})


def conflict(resource, group, name, detail):
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s'
                    % (_resource_ref(resource, group), name, detail), {"name": name, "group": group, "kind": resource})


def stale(resource, group, name):
    return conflict(resource, group, name,
                    "the object has been modified; please apply your changes to the latest version and try again")


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def internal(message):
    return ApiError(500, "InternalError", message, {"causes": [{"message": message}]})


def options_invalid(kind, errors):
    """Invalid query options (CreateOptions, PatchOptions...): the real server reports them as meta.k8s.io kinds."""
    return invalid_error(kind, "meta.k8s.io", "", errors)


NOT_FOUND_PATH = ApiError(404, "NotFound", "the server could not find the requested resource", {})
