"""Create-time validation of names, labels, Services, Pods and Jobs, with the real API's wording.
Only what a torchx scheduler can get wrong is checked; every error is collected, not just the first."""

from __future__ import annotations

import re
from typing import Any

from tests.kubernetes.apiserver.errors import FieldError

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

SUBDOMAIN_TEXT = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                  "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
                  "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_1123_TEXT = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
                   "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation "
                   "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
LABEL_1035_TEXT = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
                   "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
                   "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
LABEL_VALUE_TEXT = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
                    "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
                    "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
QUALIFIED_NAME_TEXT = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                       "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                       "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")


def _invalid(path: str, value: Any, text: str) -> FieldError:
    shown = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    return FieldError(path, "FieldValueInvalid", f"Invalid value: {shown}: {text}")


def _required(path: str, text: str = "") -> FieldError:
    return FieldError(path, "FieldValueRequired", "Required value" + (f": {text}" if text else ""))


def _unsupported(path: str, value: Any, supported: list[str]) -> FieldError:
    listed = ", ".join(f'"{s}"' for s in supported)
    return FieldError(path, "FieldValueNotSupported", f'Unsupported value: "{value}": supported values: {listed}')


def name_errors(name: Any, style: str, path: str = "metadata.name", max_length: int | None = None) -> list[FieldError]:
    """``style`` is subdomain, label1123 or label1035 (the three name rules resources use)."""
    if not name:
        return [_required(path, "name or generateName is required")]
    pattern, text, limit = {"subdomain": (DNS1123_SUBDOMAIN, SUBDOMAIN_TEXT, 253),
                            "label1123": (DNS1123_LABEL, LABEL_1123_TEXT, 63),
                            "label1035": (DNS1035_LABEL, LABEL_1035_TEXT, 63)}[style]
    limit = min(limit, max_length) if max_length else limit
    errors = []
    if len(name) > limit:
        errors.append(_invalid(path, name, f"must be no more than {limit} characters"))
    if not pattern.match(name):
        errors.append(_invalid(path, name, text))
    return errors


def label_errors(labels: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not labels:
        return errors
    for key, value in labels.items():
        prefix, _, short = key.rpartition("/")
        if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
            errors.append(_invalid(path, key, "prefix part " + SUBDOMAIN_TEXT))
        if not short or len(short) > 63 or not QUALIFIED_NAME.match(short):
            errors.append(_invalid(path, key, QUALIFIED_NAME_TEXT if short and len(short) <= 63
                                   else "name part must be no more than 63 characters"))
        if not isinstance(value, str):
            errors.append(_invalid(path, value, "label values must be strings"))
            continue
        if len(value) > 63:
            errors.append(_invalid(path, value, "must be no more than 63 characters"))
        if not LABEL_VALUE.match(value):
            errors.append(_invalid(path, value, LABEL_VALUE_TEXT))
    return errors


def pod_spec_errors(spec: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not isinstance(spec, dict):
        return [_required(path)]
    containers = spec.get("containers") or []
    if not containers:
        errors.append(_required(f"{path}.containers"))
    seen: set[str] = set()
    for i, container in enumerate(containers):
        name = container.get("name")
        if not name:
            errors.append(_required(f"{path}.containers[{i}].name"))
        else:
            errors += name_errors(name, "label1123", f"{path}.containers[{i}].name")
            if name in seen:
                errors.append(FieldError(f"{path}.containers[{i}].name", "FieldValueDuplicate",
                                         f'Duplicate value: "{name}"'))
            seen.add(name)
        if not container.get("image"):
            errors.append(_required(f"{path}.containers[{i}].image"))
    for key in ("hostname", "subdomain"):
        if spec.get(key):
            errors += name_errors(spec[key], "label1123", f"{path}.{key}")
    for key in ("serviceAccountName", "priorityClassName"):
        if spec.get(key):
            errors += name_errors(spec[key], "subdomain", f"{path}.{key}")
    errors += label_errors(spec.get("nodeSelector"), f"{path}.nodeSelector")
    return errors


def pod_errors(pod: dict[str, Any]) -> list[FieldError]:
    metadata = pod.get("metadata") or {}
    return (name_errors(metadata.get("name"), "subdomain") + label_errors(metadata.get("labels"), "metadata.labels")
            + pod_spec_errors(pod.get("spec"), "spec"))


def service_errors(service: dict[str, Any]) -> list[FieldError]:
    metadata = service.get("metadata") or {}
    return (name_errors(metadata.get("name"), "label1035")
            + label_errors(metadata.get("labels"), "metadata.labels"))


def job_errors(job: dict[str, Any]) -> list[FieldError]:
    """Run after defaulting: restartPolicy Always is what an unset one defaults to, and is refused."""
    metadata, spec = job.get("metadata") or {}, job.get("spec") or {}
    name = metadata.get("name") or ""
    # A Job's name becomes the value of its pods' job-name label: 63 characters at most.
    errors = name_errors(name, "subdomain", max_length=63)
    errors += label_errors(metadata.get("labels"), "metadata.labels")
    template = spec.get("template") or {}
    errors += label_errors((template.get("metadata") or {}).get("labels"), "spec.template.metadata.labels")
    pod_spec = template.get("spec") or {}
    errors += pod_spec_errors(pod_spec, "spec.template.spec")
    restart = pod_spec.get("restartPolicy", "Always")
    if restart not in ("OnFailure", "Never"):
        errors.append(_unsupported("spec.template.spec.restartPolicy", restart, ["OnFailure", "Never"]))
    indexed = spec.get("completionMode") == "Indexed"
    if spec.get("completionMode") not in ("Indexed", "NonIndexed"):
        errors.append(_unsupported("spec.completionMode", spec.get("completionMode"), ["NonIndexed", "Indexed"]))
    if indexed and spec.get("completions") is None:
        errors.append(_required("spec.completions", "when completion mode is Indexed"))
    for key in ("parallelism", "completions", "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes",
                "activeDeadlineSeconds"):
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or value < 0):
            errors.append(_invalid(f"spec.{key}", value, "must be greater than or equal to 0"))
    if spec.get("backoffLimitPerIndex") is not None:
        if not indexed:
            errors.append(_invalid("spec.backoffLimitPerIndex", spec["backoffLimitPerIndex"],
                                   "requires indexed completion mode"))
        if restart != "Never":
            errors.append(_invalid("spec.template.spec.restartPolicy", restart,
                                   'only "Never" is supported when backoffLimitPerIndex is specified'))
    if spec.get("maxFailedIndexes") is not None and spec.get("backoffLimitPerIndex") is None:
        errors.append(_required("spec.backoffLimitPerIndex", "when maxFailedIndexes is specified"))
    if spec.get("podFailurePolicy") is not None:
        if restart != "Never":
            errors.append(_invalid("spec.template.spec.restartPolicy", restart,
                                   'only "Never" is supported when podFailurePolicy is specified'))
        if spec.get("podReplacementPolicy") != "Failed":
            errors.append(_unsupported("spec.podReplacementPolicy", spec.get("podReplacementPolicy"), ["Failed"]))
        for i, rule in enumerate(spec["podFailurePolicy"].get("rules") or []):
            if rule.get("action") not in ("FailJob", "FailIndex", "Ignore", "Count"):
                errors.append(_unsupported(f"spec.podFailurePolicy.rules[{i}].action", rule.get("action"),
                                           ["Count", "FailIndex", "FailJob", "Ignore"]))
    elif spec.get("podReplacementPolicy") not in ("Failed", "TerminatingOrFailed"):
        errors.append(_unsupported("spec.podReplacementPolicy", spec.get("podReplacementPolicy"),
                                   ["Failed", "TerminatingOrFailed"]))
    if indexed and pod_spec.get("subdomain") and isinstance(spec.get("completions"), int) and name:
        # The controller names each pod's host "{job}-{index}": a DNS label, so 63 characters at most.
        digits = len(str(max(spec["completions"] - 1, 0)))
        if len(name) + 1 + digits > 63:
            errors.append(_invalid("metadata.name", name, f"must be no more than {62 - digits} characters"))
    if spec.get("successPolicy") is not None and not indexed:
        errors.append(_invalid("spec.successPolicy", spec["successPolicy"], "requires indexed completion mode"))
    return errors


def schema_errors(obj: Any) -> list[FieldError]:
    """The object against the API's own OpenAPI schema (unknown fields refused, as with
    ``kubectl --validate=strict``): for the kinds checked no further here."""
    import kubernetes_validate

    errors = name_errors((obj.get("metadata") or {}).get("name"), "subdomain")
    try:
        kubernetes_validate.validate(obj, "1.34", strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(part) for part in error.path) or "<root>"
        errors.append(FieldError(path, "FieldValueInvalid", f"Invalid value: {error.message}"))
    return errors
