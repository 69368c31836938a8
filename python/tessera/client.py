"""A Python client for the tessera head's API, standard library only.

    from tessera.client import Client
    c = Client.from_state_dir()            # the cluster `tessera up` started (.tessera/)
    c.apply(open("examples/train/job.yaml").read())
    c.wait("job", "train-demo", "phase=Succeeded", timeout=300)
    for change in c.watch("jobs"):         # resumes after a dropped connection
        print(change.type, change.object["metadata"]["name"], change.object["status"]["phase"])

YAML is not parsed here: YAML text is split into its documents ("---" lines at column 0) and
each is sent to the head as written, so the head's parser and its refusals apply (the same as
`tessera apply -f`). Dicts and lists are sent as JSON.

Every refusal raises ApiError carrying the HTTP status, the API's message and the field it
names (e.g. status 422, field "spec.topology").
"""
import http.client
import io
import json
import os
import re
import select
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["ApiError", "Change", "Client", "SliceReservation", "WatchExpired"]

# The collection each kind is served at; the names users write map onto them.
_KIND_PATHS = {
    "jobs": "jobs", "job": "jobs", "trainjob": "jobs", "trainjobs": "jobs",
    "services": "services", "service": "services", "svc": "services",
    "hosts": "hosts", "host": "hosts",
    "events": "events", "event": "events",
    "clusterqueues": "clusterqueues", "clusterqueue": "clusterqueues", "queues": "clusterqueues",
    "queue": "clusterqueues", "cq": "clusterqueues",
    "localqueues": "localqueues", "localqueue": "localqueues", "lq": "localqueues",
    "priorityclasses": "priorityclasses", "priorityclass": "priorityclasses", "pc": "priorityclasses",
    "reservations": "slicereservations", "reservation": "slicereservations",
    "slicereservation": "slicereservations", "slicereservations": "slicereservations",
    "rsv": "slicereservations",
    # Served with keys and value lengths only: no route returns a Secret's values.
    "secrets": "secrets", "secret": "secrets",
}
# Phases a workload never leaves: waiting there for another phase can only time out.
_FINAL_PHASES = {"Succeeded", "Failed", "Expired"}
_MARKER = re.compile(r"^(---|\.\.\.)([ \t].*)?$")


class ApiError(Exception):
    """A request the head refused: status (HTTP), message and field as the API gave them."""

    def __init__(self, status, message, field=None):
        super().__init__("%s%s (HTTP %d)" % (field + ": " if field and not message.startswith(
            field) else "", message, status))
        self.status = status
        self.message = message
        self.field = field
        self.body = None  # the answer's text, as the head sent it


class WatchExpired(ApiError):
    """The head no longer has the changes after the watch's revision (410): list again."""


# What a dropped or refused connection raises: the watch reconnects from its last revision.
_DROPPED = (socket.timeout, TimeoutError, ConnectionError, urllib.error.URLError,
            http.client.HTTPException)


class _Answer(io.BytesIO):
    """A whole answer read over a kept-alive connection: read() and iteration by line, as the
    answer urlopen gives, and its HTTP status."""

    def __init__(self, status, payload):
        super().__init__(payload)
        self.status = status


class Change:
    """One change of a watch: type (ADDED, MODIFIED, DELETED), the object, its revision."""

    __slots__ = ("type", "object", "revision")

    def __init__(self, type, object, revision):
        self.type = type
        self.object = object
        self.revision = revision

    @property
    def name(self):
        return self.object.get("metadata", {}).get("name")

    def __repr__(self):
        return "Change(%s %s @%s)" % (self.type, self.name, self.revision)


def kind_path(kind):
    path = _KIND_PATHS.get(kind.lower())
    if path is None:
        raise ValueError("kind %r is unknown; valid: %s" % (kind, ", ".join(sorted(set(
            _KIND_PATHS.values())))))
    return path


def split_documents(text):
    """The documents of a YAML (or JSON) text, in order; empty and comment-only ones dropped."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        return [json.dumps(d) for d in json.loads(text)]
    docs, current = [], []
    for line in text.splitlines():
        m = _MARKER.match(line)
        if m:
            docs.append(current)
            current = [m.group(2)[1:]] if m.group(1) == "---" and m.group(2) else []
        else:
            current.append(line)
    docs.append(current)
    out = []
    for lines in docs:
        if any(l.strip() and not l.strip().startswith("#") for l in lines):
            out.append("\n".join(lines) + "\n")
    return out


def parse_condition(condition):
    """"phase=Succeeded" -> (["phase"], "Succeeded"); "delete" -> (None, None)."""
    if condition == "delete":
        return None, None
    field, sep, value = condition.partition("=")
    if not sep or not field or not value:
        raise ValueError("condition %r: write phase=Succeeded, FIELD=VALUE (a status field, "
                         "e.g. state=Ready) or delete" % condition)
    if field.startswith("status."):
        field = field[len("status."):]
    return field.split("."), value


def status_value(obj, path):
    at = obj.get("status", {})
    for key in path:
        if not isinstance(at, dict) or key not in at:
            return None
        at = at[key]
    return at if isinstance(at, str) else json.dumps(at)


# The kinds that live in a namespace (docs/security.md "Users and roles"); the others are
# cluster-wide.
NAMESPACED_KINDS = ("jobs", "services", "slicereservations", "localqueues", "secrets", "events")


class Client:
    """The head at `url` (https://HOST:PORT; http:// for a head started with --plain-http)
    with a `token`: the admin token or a user's (None: no Authorization header, e.g. to see what
    an anonymous caller gets). An https head's certificate is verified against `ca_file`, the
    cluster CA (ca.crt in the head's state directory); it defaults to $TESSERA_CA_FILE, then
    .tessera/ca.crt, as for the CLI. get, list, delete, watch and wait of namespaced kinds act in
    `namespace` (default "default")."""

    def __init__(self, url, token, timeout=30.0, ca_file=None, namespace="default"):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.namespace = namespace
        self.ca_file = ca_file or os.environ.get("TESSERA_CA_FILE") or os.path.join(
            os.environ.get("TESSERA_STATE_DIR") or ".tessera", "ca.crt")
        self._ssl = None
        if self.url.startswith("https://"):
            if not os.path.exists(self.ca_file):
                raise FileNotFoundError(
                    "%s: no such file; an https:// head is verified against the cluster CA: "
                    "pass ca_file (ca.crt in the head's state directory) or set "
                    "TESSERA_CA_FILE" % self.ca_file)
            self._ssl = ssl.create_default_context(cafile=self.ca_file)
            self._ssl.minimum_version = ssl.TLSVersion.TLSv1_2
        self._idle = []  # kept-alive connections between calls (_exchange)
        self._idle_lock = threading.Lock()

    @classmethod
    def from_config(cls, path=None, timeout=30.0, namespace=None):
        """A user's config file, as `tessera user create` writes it (path defaults to
        $TESSERA_CONFIG): its server, token, cluster CA and namespace (`namespace` overrides
        it)."""
        path = path or os.environ.get("TESSERA_CONFIG")
        if not path:
            raise FileNotFoundError("no config file: pass a path or set TESSERA_CONFIG")
        with open(path) as f:
            config = json.load(f)
        if not isinstance(config, dict) or "server" not in config or "token" not in config:
            raise ValueError("%s: not a tessera config file (it needs server and token)" % path)
        return cls(config["server"], config["token"], timeout, config.get("caFile") or None,
                   namespace or config.get("namespace") or "default")

    def _in_namespace(self, kind):
        """The query that names this client's namespace for `kind` ("" for the default one and
        for cluster-wide kinds, so those requests are what they always were)."""
        if kind_path(kind) not in NAMESPACED_KINDS or self.namespace == "default":
            return ""
        return "?namespace=" + urllib.parse.quote(self.namespace)

    @classmethod
    def from_state_dir(cls, state_dir=None, timeout=30.0):
        """The head a `tessera up` (or `tessera head`) started: its head.json and admin.token.
        state_dir defaults to $TESSERA_STATE_DIR, then .tessera; $TESSERA_SERVER and
        $TESSERA_TOKEN override the files, as for the CLI; $TESSERA_CONFIG names a user's config
        file instead (from_config)."""
        if os.environ.get("TESSERA_CONFIG") and not os.environ.get("TESSERA_TOKEN"):
            return cls.from_config(timeout=timeout)
        state_dir = state_dir or os.environ.get("TESSERA_STATE_DIR") or ".tessera"
        url = os.environ.get("TESSERA_SERVER")
        if not url:
            path = os.path.join(state_dir, "head.json")
            try:
                with open(path) as f:
                    head = json.load(f)
            except OSError as e:
                raise FileNotFoundError("%s: %s; start a cluster with `tessera up`, or set "
                                        "TESSERA_SERVER" % (path, e.strerror)) from None
            host = head.get("address", "127.0.0.1")
            url = "%s://%s:%d" % (head.get("scheme", "http"),
                                  "127.0.0.1" if host == "0.0.0.0" else host, head["port"])
        token = os.environ.get("TESSERA_TOKEN")
        if not token:
            with open(os.path.join(state_dir, "admin.token")) as f:
                token = f.read().strip()
        ca_file = os.environ.get("TESSERA_CA_FILE") or os.path.join(state_dir, "ca.crt")
        return cls(url, token, timeout, ca_file=ca_file)

    # --- transport ---

    # An ordinary call goes over a kept-alive connection: one TLS handshake serves many calls,
    # which costs the head about a third, and this client a tenth, of the CPU of a connection per
    # call. A watch or a follow holds its answer open, so it takes a connection of its own.

    def close(self):
        """Closes the kept-alive connections (a later call opens a new one)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __del__(self):
        # A client dropped with a kept-alive connection closes it (else the socket is only
        # collected, with a ResourceWarning).
        if getattr(self, "_idle", None):
            self.close()

    def _connection(self, timeout):
        """(a connection, whether it served calls before): a kept-alive one whose head has not
        closed it, else a new one."""
        while True:
            with self._idle_lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            sock = conn.sock
            # Readable while idle means the head closed it (or broke the protocol): not reused.
            if sock is not None and not select.select([sock], [], [], 0)[0]:
                sock.settimeout(timeout)
                return conn, True
            conn.close()
        split = urllib.parse.urlsplit(self.url)
        if self._ssl is not None:
            return http.client.HTTPSConnection(split.hostname, split.port or 443, timeout=timeout,
                                               context=self._ssl), False
        return http.client.HTTPConnection(split.hostname, split.port or 80, timeout=timeout), False

    def _exchange(self, method, path, data, headers, timeout):
        """(status, body bytes) of one call over a kept-alive connection. A kept-alive connection
        that the head closed just as it was taken is replaced by a new one, once; every other
        failure raises urllib.error.URLError (or socket.timeout), as urlopen does."""
        target = urllib.parse.urlsplit(self.url).path.rstrip("/") + path
        for attempt in (0, 1):
            conn, reused = self._connection(timeout)
            try:
                conn.request(method, target, body=data, headers=headers)
                r = conn.getresponse()
                payload = r.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                conn.close()
                if reused and attempt == 0:
                    continue
                raise urllib.error.URLError(e) from None
            except (socket.timeout, TimeoutError):
                conn.close()
                raise
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise urllib.error.URLError(e) from None
            if r.will_close:
                conn.close()
            else:
                with self._idle_lock:
                    self._idle.append(conn)
            return r.status, payload

    def _open(self, method, path, body=None, timeout=None, content_type="application/json",
              stream=False):
        """The answer to one call, to read (`with ... as r: r.read()`, `r.status`); ApiError on a
        refusal. stream=True: on a connection of its own, read as it arrives (a watch, a
        follow); else read whole over a kept-alive connection."""
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else body.encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", content_type)
        timeout = self.timeout if timeout is None else timeout
        if not stream:
            status, payload = self._exchange(method, path, data, dict(req.header_items()), timeout)
            if status >= 400:
                raise self._error(status, payload.decode("utf-8", "replace"))
            return _Answer(status, payload)
        try:
            return urllib.request.urlopen(req, timeout=timeout, context=self._ssl)
        except urllib.error.HTTPError as e:
            raise self._error(e.code, e.read().decode("utf-8", "replace")) from None

    @staticmethod
    def _error(status, text):
        try:
            j = json.loads(text)
        except ValueError:
            j = None
        if isinstance(j, dict):
            message, field = str(j.get("error", text)), j.get("field")
        else:
            message, field = text, None
        e = (WatchExpired if status == 410 else ApiError)(status, message, field)
        e.body = text
        return e

    def request(self, method, path, body=None):
        """One call; the parsed JSON answer. ApiError on a refusal."""
        with self._open(method, path, body) as r:
            text = r.read().decode()
        return json.loads(text) if text.strip().startswith(("{", "[")) else text

    def call(self, method, path, body=None, content_type="application/json"):
        """One call that does not raise on a refusal: (HTTP status, parsed JSON answer or
        text). For scripts and tests that look at the status itself; `body` is a dict or list
        (sent as JSON), text or bytes (sent as they are)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        try:
            with self._open(method, path, body, content_type=content_type) as r:
                status, text = r.status, r.read().decode("utf-8", "replace")
        except ApiError as e:
            status, text = e.status, e.body
        try:
            return status, json.loads(text) if text.strip().startswith(("{", "[")) else text
        except ValueError:
            return status, text

    # --- resources ---

    def apply(self, manifest, dry_run=False):
        """Creates or updates what `manifest` describes: a dict (one document), a list of
        dicts, or YAML/JSON text with one or more documents. Applied in order; the first
        refusal raises ApiError (the ones before it stay applied). Returns the list of what the
        head answered, one per document."""
        if isinstance(manifest, dict):
            bodies = [json.dumps(manifest)]
        elif isinstance(manifest, (list, tuple)):
            bodies = [json.dumps(d) for d in manifest]
        elif isinstance(manifest, str):
            bodies = split_documents(manifest)
        else:
            raise TypeError("apply: a dict, a list of dicts or YAML/JSON text, not %s"
                            % type(manifest).__name__)
        path = "/api/v1/apply" + ("?dryRun=true" if dry_run else "")
        return [self.request("POST", path, b) for b in bodies]

    def get(self, kind, name):
        return self.request("GET", "/api/v1/%s/%s%s" % (
            kind_path(kind), urllib.parse.quote(name), self._in_namespace(kind)))

    def list(self, kind, chunk_size=500):
        """The items of `kind` (the list's metadata.resourceVersion is dropped: watch() takes
        care of versions), asked for in pages of `chunk_size` (?limit=, following
        metadata.continue as kubectl's --chunk-size does; 0 asks for the whole list at once)."""
        return self._list_pages(kind, chunk_size)["items"]

    def _list_pages(self, kind, chunk_size=500):
        """The whole list of `kind`, page after page: every page's items, and the first page's
        metadata (its resourceVersion is the one every page answers, the one to watch from). A
        head without pages answers the whole list to the first request."""
        path = "/api/v1/" + kind_path(kind) + self._in_namespace(kind)
        if not chunk_size:
            return self.request("GET", path)
        first = path + ("&" if "?" in path else "?") + "limit=%d" % chunk_size
        listed = self.request("GET", first)
        token = listed.get("metadata", {}).get("continue")
        while token:
            page = self.request("GET", first + "&continue=" + urllib.parse.quote(token))
            listed["items"].extend(page.get("items", []))
            token = page.get("metadata", {}).get("continue")
        listed.get("metadata", {}).pop("continue", None)
        listed.get("metadata", {}).pop("remainingItemCount", None)
        return listed

    def delete(self, kind, name, force=False):
        path = "/api/v1/%s/%s" % (kind_path(kind), urllib.parse.quote(name))
        query = self._in_namespace(kind)
        if force:
            query += ("&" if query else "?") + "force=true"
        return self.request("DELETE", path + query)

    # --- watches ---

    def watch(self, kind, resource_version=None, timeout=None, reconnect_delay=0.2):
        """Yields a Change per change of `kind`: without resource_version, first the current
        objects as ADDED (from one list, so a drop cannot cut the snapshot short), then every
        change after that list. When the connection drops, the watch reconnects from the
        revision of the last change it yielded, so nothing is lost or repeated; a line cut off
        by the drop is never parsed (it comes again after the reconnect). If the head no
        longer holds the changes after that revision (410, e.g. it restarted), it lists again
        and yields the objects that differ from what it had yielded (ADDED, MODIFIED,
        DELETED), then watches on. `timeout` (seconds) ends the iteration when reached."""
        path = "/api/v1/%s?watch=true" % kind_path(kind) + self._in_namespace(kind).replace("?", "&")
        deadline = None if timeout is None else time.monotonic() + timeout
        revision = resource_version
        known = {}  # name -> last object yielded, to resynchronise after a 410
        while revision is None:
            try:
                changes, revision = self._resync(kind, known)
            except _DROPPED:
                if deadline is not None and time.monotonic() >= deadline:
                    return
                time.sleep(reconnect_delay)
                continue
            for c in changes:
                yield c
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                return
            target = path + "&resourceVersion=%s" % revision
            try:
                remaining = None if deadline is None else max(0.05, deadline - time.monotonic())
                # A read timeout of at most 5 s, so a dead connection or the deadline is seen.
                with self._open("GET", target, stream=True,
                                timeout=5.0 if remaining is None else min(5.0, remaining)) as r:
                    for raw in r:
                        if not raw.endswith(b"\n"):
                            break  # cut off by a drop: reconnect from the last whole line
                        line = raw.decode().strip()
                        if not line:
                            continue
                        change = json.loads(line)
                        if change.get("type") == "ERROR":
                            obj = change.get("object", {})
                            raise self._error(int(obj.get("code", 500)), json.dumps(
                                {"error": obj.get("message", "the head ended the watch"),
                                 "field": "resourceVersion"}))
                        c = Change(change["type"], change["object"], change.get("resourceVersion"))
                        revision = c.revision or revision
                        if c.type == "DELETED":
                            known.pop(c.name, None)
                        else:
                            known[c.name] = c.object
                        yield c
                        if deadline is not None and time.monotonic() >= deadline:
                            return
            except WatchExpired:
                try:
                    changes, revision = self._resync(kind, known)
                except _DROPPED:
                    changes = []  # the head is away: the next round answers 410 again or lists
                for c in changes:
                    yield c
                continue
            except _DROPPED:
                pass  # reconnect from the last revision
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(reconnect_delay)

    def _resync(self, kind, known):
        """After a 410: the list, compared with what was yielded; the changes between, and the
        list's revision, from which the watch goes on."""
        listed = self._list_pages(kind)
        version = listed.get("metadata", {}).get("resourceVersion")
        if not version:
            raise ApiError(500, "the head's list of %s has no metadata.resourceVersion to watch "
                           "from" % kind_path(kind), "metadata.resourceVersion")
        out = []
        now = {i["metadata"]["name"]: i for i in listed["items"]}
        for name, obj in now.items():
            if name not in known:
                out.append(Change("ADDED", obj, version))
            elif _changed(known[name], obj):
                out.append(Change("MODIFIED", obj, version))
        for name in [n for n in known if n not in now]:
            out.append(Change("DELETED", known.pop(name), version))
        known.update(now)
        return out, version

    def wait(self, kind, name, condition="phase=Succeeded", timeout=60.0):
        """Blocks until `condition` holds for the object ("phase=Succeeded", FIELD=VALUE under
        status, or "delete"), and returns the object (None for delete). TimeoutError when
        `timeout` passes; RuntimeError when a job reaches a final phase other than the one
        asked for, or the object is deleted while waiting for a phase."""
        path, value = parse_condition(condition)
        deadline = time.monotonic() + timeout
        try:
            current = self.get(kind, name)
        except ApiError as e:
            if e.status == 404 and path is None:
                return None
            raise
        last = status_value(current, path) if path else None
        for c in self.watch(kind, timeout=max(0.0, deadline - time.monotonic())):
            if c.name != name:
                continue
            if c.type == "DELETED":
                if path is None:
                    return None
                raise RuntimeError("%s %s was deleted while waiting for %s" % (kind, name,
                                                                                condition))
            if path is None:
                continue
            last = status_value(c.object, path)
            if last is not None and last.lower() == value.lower():
                return c.object
            phase = c.object.get("status", {}).get("phase")
            if path == ["phase"] and phase in _FINAL_PHASES:
                st = c.object.get("status", {})
                raise RuntimeError("%s %s is %s, so never %s (%s: %s)" % (
                    kind, name, phase, value, st.get("reason", ""), st.get("message", "")))
        raise TimeoutError("timed out after %.0f s waiting for %s %s %s (now %s)" % (
            timeout, kind, name, condition, last))

    # --- logs ---

    def logs(self, kind, name, worker=0, follow=False, role="server", replica=0):
        """A worker's log: the text, or with follow=True an iterator of lines (without "\\n")
        that ends when the worker's log ends. kind is "job" or "service"."""
        path = kind_path(kind)
        if path == "jobs":
            target = "/api/v1/jobs/%s/logs?worker=%d" % (urllib.parse.quote(name), worker)
        elif path == "services":
            target = "/api/v1/services/%s/logs?role=%s&replica=%d&worker=%d" % (
                urllib.parse.quote(name), urllib.parse.quote(role), replica, worker)
        else:
            raise ValueError("logs: only jobs and services have logs, not %r" % kind)
        if not follow:
            with self._open("GET", target) as r:
                return r.read().decode("utf-8", "replace")
        return self._follow(target + "&follow=true")

    def _follow(self, target):
        with self._open("GET", target, timeout=None, stream=True) as r:
            for raw in r:
                yield raw.decode("utf-8", "replace").rstrip("\n").rstrip("\r")

    # --- reservations ---

    def reserve_slices(self, accelerator, topology, num_slices=1, timeout=None, name=None,
                       queue=None, ttl=None, priority=None):
        """Reserves `num_slices` whole slices of `accelerator` and `topology`, all or nothing,
        as Ray's slice_placement_group does: applies a SliceReservation and returns its
        SliceReservation handle. With `timeout` (seconds), also waits for it to be Ready (see
        SliceReservation.ready). `ttl` is a duration ("30m", "2h"): the head lets the slices go
        when it passes; `queue` is the LocalQueue (metadata.queue) and `priority` the
        PriorityClass (spec.priority), named as for a TrainJob. A TrainJob runs inside it by
        naming it in spec.reservation.

        Needs a head that serves kind SliceReservation; an older one refuses the apply with
        ApiError 422 (field "kind")."""
        if not isinstance(num_slices, int) or isinstance(num_slices, bool) or num_slices < 1:
            raise ValueError("num_slices must be an int >= 1, got %r" % (num_slices,))
        name = name or "rsv-%x" % (int(time.time() * 1000) & 0xFFFFFFFFFF)
        spec = {"accelerator": accelerator, "topology": topology, "slices": num_slices}
        metadata = {"name": name}
        if queue:
            metadata["queue"] = queue
        if priority:
            spec["priority"] = priority
        if ttl:
            spec["ttl"] = ttl
        self.apply({"apiVersion": "tessera/v1", "kind": "SliceReservation",
                    "metadata": metadata, "spec": spec})
        r = SliceReservation(self, name)
        if timeout is not None:
            r.ready(timeout)
        return r

    def reservation(self, name):
        """The handle of an existing SliceReservation (e.g. one applied from YAML)."""
        r = SliceReservation(self, name)
        r.refresh()
        return r


class SliceReservation:
    """A SliceReservation on the head, by name. ready(timeout) blocks until the head holds
    every slice (phase Ready) and returns self; then .slices and .hosts say which. delete()
    gives the slices back (409 while a workload runs inside it, unless force=True, which
    stops those workloads). As a context manager it deletes itself (force) on exit.

    Not thread-safe: use one handle per thread."""

    def __init__(self, client, name):
        self.client = client
        self.name = name
        self.object = None  # the reservation as last read from the head

    def refresh(self):
        """Reads the reservation again; returns its status."""
        self.object = self.client.get("reservation", self.name)
        return self.status

    @property
    def status(self):
        return (self.object or {}).get("status", {})

    @property
    def phase(self):
        return self.status.get("phase")

    @property
    def slices(self):
        """The reserved slices as the head lists them in status.slices (empty until Ready)."""
        return list(self.status.get("slices") or [])

    @property
    def hosts(self):
        """The reserved hosts: status.hosts, or the hosts of each slice in order."""
        hosts = self.status.get("hosts")
        if hosts is not None:
            return list(hosts)
        out = []
        for s in self.slices:
            if isinstance(s, dict):
                out.extend(s.get("hosts", []))
        return out

    @property
    def users(self):
        """The workloads running inside it now, as the head names them ("trainjob/a")."""
        return list(self.status.get("users") or [])

    def ready(self, timeout=60.0):
        """Blocks until the reservation is Ready and returns self. TimeoutError when `timeout`
        (seconds) passes first, naming the reason the head gives for it being Pending;
        RuntimeError when it is Expired or deleted meanwhile."""
        deadline = time.monotonic() + timeout
        self.refresh()
        if self._settled():
            return self
        for c in self.client.watch("reservations", timeout=max(0.0, deadline - time.monotonic())):
            if c.name != self.name:
                continue
            if c.type == "DELETED":
                raise RuntimeError("reservation %s was deleted while waiting for it to be Ready"
                                   % self.name)
            self.object = c.object
            if self._settled():
                return self
        try:
            self.refresh()
        except ApiError as e:
            if e.status == 404:
                raise RuntimeError("reservation %s was deleted while waiting for it to be Ready"
                                   % self.name) from None
            raise
        if self._settled():
            return self
        raise TimeoutError("reservation %s is not Ready after %g s: %s" % (
            self.name, timeout, self._why()))

    def _settled(self):
        """True when Ready; raises when it can never become Ready."""
        if self.phase == "Ready":
            return True
        if self.phase == "Expired":
            raise RuntimeError("reservation %s is Expired, so never Ready (%s)" % (
                self.name, self._why()))
        return False

    def _why(self):
        st = self.status
        parts = [st.get("phase") or "no phase yet"]
        for key in ("reason", "message", "pendingReason"):
            if st.get(key) and st[key] not in parts:
                parts.append(str(st[key]))
        why = ": ".join(parts)
        helps = st.get("wouldHelp")
        if helps:
            # The workloads whose end would let it in, as explain lists them.
            why += "; would fit after: " + ", ".join(
                "%s (%s, %s chips)" % (h.get("name"), h.get("clusterQueue"), h.get("chips"))
                if isinstance(h, dict) else str(h) for h in helps)
        return why

    def delete(self, force=False):
        """Gives the slices back. ApiError 409 (naming the workloads) while any runs inside
        it, unless force=True."""
        return self.client.delete("reservation", self.name, force=force)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.delete(force=True)
        except ApiError as e:
            if e.status != 404:
                raise

    def __repr__(self):
        return "SliceReservation(%s %s)" % (self.name, self.phase or "?")


def _changed(a, b):
    """Whether two versions of an object differ, ignoring their resourceVersion."""
    def strip(o):
        o = dict(o)
        o["metadata"] = {k: v for k, v in o.get("metadata", {}).items() if k != "resourceVersion"}
        return o
    return strip(a) != strip(b)

