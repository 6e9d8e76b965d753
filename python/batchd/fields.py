"""Fields beside the image: the members a plan asks for with each sample
(``txt``, ``json``, ``__key__``, any extension), as Python values.

``batchd.Loader(..., fields=["txt"])`` yields ``(images, texts)``;
``batch_format="dict"`` yields ``{"image": tensor, "label": tensor,
"txt": [str], "json": [dict], "__key__": [str]}`` (docs/datasets.md,
"Image-text samples").
"""

import json as _json

# Values of these fields are text; of "json", parsed objects; of any other
# extension, bytes.
_TEXT_FIELDS = ("txt", "text", "caption", "__key__")


def parse_fields(fields):
    """``fields`` as [(name, max_bytes)]: a list of names, of
    ``(name, max_bytes)`` pairs, or a dict name -> max_bytes (0 or None:
    the daemon's default bound). The daemon checks the names and bounds."""
    if fields is None:
        return []
    if isinstance(fields, str):
        raise ValueError(f"fields must be a list of names, not the string "
                         f"{fields!r} (write [{fields!r}])")
    items = fields.items() if isinstance(fields, dict) else fields
    out = []
    for item in items:
        if isinstance(item, str):
            name, max_bytes = item, 0
        else:
            name, max_bytes = item
        if not isinstance(name, str):
            raise ValueError(f"a field name must be a str, not {name!r}")
        max_bytes = 0 if max_bytes is None else max_bytes
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"field {name!r}: max_bytes must be an int >= 0 "
                             f"(0: the default), not {max_bytes!r}")
        out.append((name, max_bytes))
    return out


def decode(name, values):
    """One field's per-sample bytes as Python values: str for text (a cut
    member is cut at a character boundary, so it decodes), a parsed object
    for json (None where it is empty, cut or not JSON), bytes otherwise."""
    if name == "json":
        out = []
        for value in values:
            try:
                out.append(_json.loads(value) if value else None)
            except ValueError:
                out.append(None)
        return out
    if name in _TEXT_FIELDS:
        return [value.decode("utf-8", errors="replace") for value in values]
    return list(values)


def batch_output(batch_format, images, labels, fields, values):
    """What the loader yields: (images, field, ...) or a dict."""
    decoded = [decode(name, value) for (name, _), value in zip(fields, values)]
    if batch_format == "dict":
        out = {"image": images, "label": labels}
        for (name, _), value in zip(fields, decoded):
            out[name] = value
        return out
    return (images, *decoded)
