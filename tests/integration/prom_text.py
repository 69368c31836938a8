"""A strict parser of the Prometheus text exposition format (version 0.0.4), standard library
only. It refuses anything a lenient scraper might let through:

- every line ends in "\\n" (the last one too); no blank lines, no carriage returns;
- "# HELP name text" and "# TYPE name type" at most once per family, TYPE before the family's
  first sample; help text escapes only \\\\ and \\n;
- metric and label names match their grammar; "__" label names are reserved; a label appears
  once per sample; label values escape only \\\\, \\" and \\n;
- values parse as Go floats ("NaN", "+Inf", "-Inf" included); an optional integer timestamp;
- a family's samples are contiguous; no series appears twice;
- counters are not negative; histograms have _bucket (with a numeric "le", increasing, with
  cumulative counts), a "+Inf" bucket equal to _count, and _sum and _count, per label set.

parse(text) returns {family: Family}; a violation raises ParseError naming the line.
"""
import math
import re

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)\Z")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


class ParseError(ValueError):
    pass


class Family:
    def __init__(self, name):
        self.name = name
        self.type = None
        self.help = None
        self.samples = []  # (sample name, {label: value}, float value)

    def get(self, name=None, **labels):
        """The value of the one sample with exactly these labels, or None."""
        name = name or self.name
        for n, l, v in self.samples:
            if n == name and l == labels:
                return v
        return None


def _value(text, lineno):
    if text in ("NaN", "+Inf", "-Inf", "Inf", "+inf", "-inf", "inf", "nan"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    if not FLOAT.match(text):
        raise ParseError("line %d: %r is not a float" % (lineno, text))
    return float(text)


def _unescape(text, allowed, lineno, what):
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text) or text[i + 1] not in allowed:
                raise ParseError("line %d: bad escape in %s: %r" % (lineno, what, text[i:i + 2]))
            out.append({"\\": "\\", "n": "\n", '"': '"'}[text[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _parse_labels(line, i, lineno):
    """Parses '{a="x",b="y"}' starting at line[i] == '{'; returns (labels, index after '}')."""
    labels = {}
    i += 1
    while True:
        if i >= len(line):
            raise ParseError("line %d: unterminated label set" % lineno)
        if line[i] == "}":
            return labels, i + 1
        m = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*").match(line, i)
        if not m:
            raise ParseError("line %d: bad label name at column %d" % (lineno, i + 1))
        name = m.group(0)
        if name.startswith("__"):
            raise ParseError("line %d: label name %r is reserved" % (lineno, name))
        if name in labels:
            raise ParseError("line %d: label %r twice" % (lineno, name))
        i = m.end()
        if line[i:i + 2] != '="':
            raise ParseError("line %d: expected =\" after label %r" % (lineno, name))
        i += 2
        j = i
        while True:
            if j >= len(line):
                raise ParseError("line %d: unterminated label value" % lineno)
            if line[j] == "\\":
                j += 2
                continue
            if line[j] == '"':
                break
            j += 1
        labels[name] = _unescape(line[i:j], '\\n"', lineno, "label value")
        i = j + 1
        if i < len(line) and line[i] == ",":
            i += 1
        elif i < len(line) and line[i] != "}":
            raise ParseError("line %d: expected , or } after label %r" % (lineno, name))


def _family_of(sample, families):
    for suffix in ("_bucket", "_sum", "_count"):
        if sample.endswith(suffix):
            base = sample[: -len(suffix)]
            if base in families and families[base].type in ("histogram", "summary"):
                return base
    return sample


def parse(text):
    if not text.endswith("\n"):
        raise ParseError("the exposition must end with a newline")
    if "\r" in text:
        raise ParseError("carriage return in the exposition")
    families = {}
    order = []  # families in the order their samples appear
    series = set()
    for lineno, line in enumerate(text[:-1].split("\n"), 1):
        if not line.strip():
            raise ParseError("line %d: blank line" % lineno)
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not METRIC_NAME.match(name):
                    raise ParseError("line %d: bad metric name %r" % (lineno, name))
                fam = families.setdefault(name, Family(name))
                rest = parts[3] if len(parts) == 4 else ""
                if parts[1] == "HELP":
                    if fam.help is not None:
                        raise ParseError("line %d: second HELP for %s" % (lineno, name))
                    fam.help = _unescape(rest, "\\n", lineno, "HELP")
                else:
                    if fam.type is not None:
                        raise ParseError("line %d: second TYPE for %s" % (lineno, name))
                    if fam.samples:
                        raise ParseError("line %d: TYPE for %s after its samples" % (lineno, name))
                    if rest not in TYPES:
                        raise ParseError("line %d: unknown type %r" % (lineno, rest))
                    fam.type = rest
            continue
        m = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*").match(line)
        if not m:
            raise ParseError("line %d: bad metric name" % lineno)
        sample = m.group(0)
        i = m.end()
        labels = {}
        if i < len(line) and line[i] == "{":
            labels, i = _parse_labels(line, i, lineno)
        if i >= len(line) or line[i] != " ":
            raise ParseError("line %d: expected a space before the value" % lineno)
        fields = line[i + 1:].split(" ")
        if len(fields) not in (1, 2) or "" in fields:
            raise ParseError("line %d: expected 'value [timestamp]'" % lineno)
        value = _value(fields[0], lineno)
        if len(fields) == 2 and not re.fullmatch(r"-?\d+", fields[1]):
            raise ParseError("line %d: bad timestamp %r" % (lineno, fields[1]))
        name = _family_of(sample, families)
        fam = families.setdefault(name, Family(name))
        if not order or order[-1] != name:
            if name in order:
                raise ParseError("line %d: samples of %s are not together" % (lineno, name))
            order.append(name)
        key = (sample, tuple(sorted(labels.items())))
        if key in series:
            raise ParseError("line %d: duplicate series %s%s" % (lineno, sample, labels))
        series.add(key)
        if fam.type == "counter" and (value < 0 or math.isnan(value)):
            raise ParseError("line %d: counter %s is %r" % (lineno, sample, value))
        if fam.type == "histogram" and sample == name:
            raise ParseError("line %d: histogram %s needs _bucket/_sum/_count" % (lineno, name))
        if sample.endswith("_bucket") and fam.type == "histogram" and "le" not in labels:
            raise ParseError("line %d: %s without le" % (lineno, sample))
        fam.samples.append((sample, labels, value))
    for fam in families.values():
        if fam.type == "histogram":
            _check_histogram(fam)
    return families


def _check_histogram(fam):
    groups = {}
    for sample, labels, value in fam.samples:
        rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        g = groups.setdefault(rest, {"buckets": [], "sum": None, "count": None})
        if sample.endswith("_bucket"):
            le = labels["le"]
            bound = math.inf if le == "+Inf" else _value(le, 0)
            g["buckets"].append((bound, value))
        elif sample.endswith("_sum"):
            g["sum"] = value
        else:
            g["count"] = value
    for rest, g in groups.items():
        where = "%s%s" % (fam.name, dict(rest))
        if g["sum"] is None or g["count"] is None:
            raise ParseError("%s: _sum or _count missing" % where)
        bounds = [b for b, _ in g["buckets"]]
        if bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
            raise ParseError("%s: le bounds not increasing" % where)
        if not bounds or bounds[-1] != math.inf:
            raise ParseError("%s: no +Inf bucket" % where)
        counts = [c for _, c in g["buckets"]]
        if any(b < a for a, b in zip(counts, counts[1:])):
            raise ParseError("%s: bucket counts are not cumulative" % where)
        if counts[-1] != g["count"]:
            raise ParseError("%s: +Inf bucket %r != _count %r" % (where, counts[-1], g["count"]))
