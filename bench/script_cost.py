#!/usr/bin/env python3
"""bench/script_cost.py — Redis time per job of the fetch script and the acknowledgement, as the worker sends them.

    python3 bench/script_cost.py [N] [BATCH]      default N=100000 jobs, BATCH=250 (the worker's fetch batch)
    SOURCES=/path/to/other/checkout python3 bench/script_cost.py     the scripts of another tree (an A/B comparison)

Reads the scripts' Lua text from Sources/Queue/Scripts/ (RuntimeScripts.swift, and BatchScripts.swift's shared
functions; an older tree's Sources/Queue/Scripts.swift too, for SOURCES=), so it
measures what is in the tree. For each of 3 runs: N no-op payloads are pushed onto `queue:default` of database 59 of
the private Redis (scripts/services: 127.0.0.1:$REDIS_PORT, default 6390; flushed first), fetched BATCH at a time
into an in-flight list by the fetch script, then acknowledged BATCH at a time as the worker does (this tree:
ReliableQueue.acknowledge's tail cut, a transaction watching the fetcher heartbeat; trees before it: the settle script). Redis's own
`INFO commandstats` gives the microseconds spent in each (the figure: Redis is the shared resource of a fleet), reset
before each phase; the wall rate is printed too, and for the drain-shaped phase Redis's CPU (`INFO cpu`), which also
holds the networking (the tail cut sends the stretch it reads back to the client). Prints the median (min–max) of the
3 runs and the persistence in force. Two floors are printed next to them: the same moves as plain commands (not
atomic: a lower bound, not a design), and the same moves through two minimal scripts whose only work is to carry the
payloads through Lua (what any Lua fetch and any acknowledgement matching payloads in Lua cost on this Redis: the
acknowledgement left Lua for that reason, issue 38).
A benchmark, not a test: it asserts only that every job moved.
"""
import os
import random
import re
import socket
import statistics
import sys
import time

ROOT = os.environ.get("SOURCES", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 250
RUNS = 3


class Redis:
    """The smallest RESP2 client: one connection, one command at a time."""

    def __init__(self, port, db):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")
        self.call("SELECT", db)

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self.file.read(size + 2)[:-2]
            return data
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self.read() for _ in range(size)]
        raise RuntimeError("bad reply %r" % line)


def lua(paths, pattern):
    """The Lua matched by `pattern` in the first of `paths` (newest layout first) that exists under ROOT."""
    path = next((p for p in paths if os.path.exists(os.path.join(ROOT, p))), paths[0])
    text = open(os.path.join(ROOT, path)).read()
    match = re.search(pattern, text, re.S)
    if not match:
        sys.exit("script_cost: cannot find the script in %s (has it moved?)" % path)
    return match.group(1)


RUNTIME = ["Sources/Queue/Scripts/RuntimeScripts.swift", "Sources/Queue/Scripts.swift"]
BATCH_SOURCES = ["Sources/Queue/Scripts/BatchScripts.swift", "Sources/Queue/Batches/BatchScripts.swift"]
functions = lua(BATCH_SOURCES, r'static let functions = """\n(.*?)\n\s*"""')
runtime_text = open(os.path.join(ROOT, next((p for p in RUNTIME if os.path.exists(os.path.join(ROOT, p))), RUNTIME[0]))).read()
# Trees with the key types (`RedisScript(keys: ScriptKeys…, …)`): a script names its fixed keys through locals bound to
# KEYS[] and derives the others with generated functions (Sources/Queue/Redis/RedisScript.swift). This rebuilds that
# preamble for the key names Queue's scripts use (Sources/Queue/Scripts/ScriptKeys+Queue.swift, Keys.swift).
KEY_TYPES = "RedisScript(keys:" in runtime_text
FIXED = {"queues": ("QUEUES", "queues"), "paused": ("PAUSED", "paused"), "schedule": ("SCHEDULE", "schedule"),
         "retry": ("RETRY", "retry"), "dead": ("DEAD", "dead"), "batches": ("BATCHES", "batches"),
         "statProcessed": ("STAT_PROCESSED", "stat:processed"), "statFailed": ("STAT_FAILED", "stat:failed")}
DERIVED = {"queueKey": [("queue_key(p1)", "'queue:' .. p1")],
           "workingKey": [("working_key(p1, p2)", "'working:queue:' .. p1 .. ':' .. p2")],
           "uniqueOwnerKey": [("unique_owner_key(p1)", "'unique-jid:' .. p1")],
           "completionKey": [("completion_key(p1)", "'completion:' .. p1")],
           "statDayKeys": [("stat_processed_day_key(p1)", "'stat:processed:' .. p1"),
                           ("stat_failed_day_key(p1)", "'stat:failed:' .. p1"),
                           ("stat_minutely_processed_key(p1)", "'stat:minutely:processed:' .. p1"),
                           ("stat_minutely_failed_key(p1)", "'stat:minutely:failed:' .. p1")],
           "batchKeys": [("batch_key(p1)", "'b-' .. p1"), ("batch_jids_key(p1)", "'b-' .. p1 .. '-jids'"),
                         ("batch_done_key(p1)", "'b-' .. p1 .. '-done'"), ("batch_failed_key(p1)", "'b-' .. p1 .. '-failed'"),
                         ("batch_died_key(p1)", "'b-' .. p1 .. '-died'")]}
SWIFT_FILES = {"BatchScripts": BATCH_SOURCES[0], "UniqueScripts": "Sources/Queue/Scripts/UniqueScripts.swift",
               "OversizedScripts": "Sources/Queue/Scripts/OversizedScripts.swift", "Scripts": RUNTIME[0]}


def swift_static(owner, name):
    """The text of `static let name = …` in `owner`'s file, up to the end of its line or string."""
    text = open(os.path.join(ROOT, SWIFT_FILES[owner])).read()
    match = re.search(r'static let %s = (#?)"""\n(.*?)\n\s*"""#?' % name, text, re.S)
    if match:
        body = match.group(2)
        return body if match.group(1) else body.replace("\\\\", "\\")
    match = re.search(r"static let %s = ([^\n]+)" % name, text)
    return match.group(1).strip()


def key_chain(chain):
    """(fixed keys in order, derivation lines) of a ScriptKeys chain such as `BatchScripts.keys.dead.workingKey`."""
    names = chain.split(".")
    fixed, derived = [], []
    if names[0] != "ScriptKeys()":
        fixed, derived = key_chain(swift_static(names[0], names[1]))
        names = names[2:]
    else:
        names = names[1:]
    for name in names:
        if name in FIXED and FIXED[name] not in fixed:
            fixed.append(FIXED[name])
        for signature, body in DERIVED.get(name, []):
            line = "local function %s return %s end" % (signature, body)
            if line not in derived:
                derived.append(line)
    return fixed, derived


def keyed_script(name):
    """A key-types tree's script `Scripts.name` as Redis gets it, and its fixed keys (sent in KEYS[])."""
    match = re.search(r'static let %s = RedisScript\(keys: ([\w.()]+)\s*(?:\n\s*([\w.]+))?,\s*(.*?)\n\s*"""(?:\]\.joined\(separator: "\\n"\))?\)\n' % name,
                      runtime_text, re.S)
    if not match:
        sys.exit("script_cost: cannot find Scripts.%s (has it moved?)" % name)
    chain = match.group(1) + (match.group(2) or "")
    fixed, derived = key_chain(chain)
    rest = match.group(3)
    parts = []
    if rest.startswith("["):  # [A.b, C.d, \"\"\"…  or  [A.b, C.d].joined(separator: "\n") + \"\"\"…
        heads, body = rest[1:].split('"""\n', 1)
        heads = heads.replace('].joined(separator: "\\n") +', ",")
        parts = [swift_static(*h.strip().split(".")) for h in heads.split(",") if h.strip()]
    else:  # A.b + \"\"\"…  or  \"\"\"…
        heads, body = rest.split('"""\n', 1)
        parts = [swift_static(*h.strip().split(".")) for h in heads.split("+") if h.strip() and h.strip() != '"\\n"']
    def retentions(text):
        return text.replace("\\(Keys.dailyStatRetention)", "157680000").replace("\\(Keys.minutelyRetention)", "259200")
    body = retentions(body)
    parts = [retentions(part) for part in parts]
    preamble = ["local %s = KEYS[#KEYS%s]" % (local, "" if i == len(fixed) - 1 else " - %d" % (len(fixed) - 1 - i))
                for i, (local, _) in enumerate(fixed)] + derived
    return "\n".join(preamble) + "\n" + "\n".join(parts + [body]), [key for _, key in fixed]


if KEY_TYPES:
    fetch, FETCH_KEYS = keyed_script("fetch")
    settle, _ = keyed_script("complete")
else:
    FETCH_KEYS = []
    fetch = lua(RUNTIME, r'static let fetch = RedisScript\("""\n(.*?)\n\s*"""\)')
    settle = functions + "\n" + lua(RUNTIME,
                                    r'static let complete = RedisScript\(BatchScripts.functions \+ """\n(.*?)\n\s*"""\)')
# The fetch that measures each payload (issue 51) takes the size limit, now, the day and the dead limits first.
SIZED_FETCH = "local maxBytes = tonumber(ARGV[3])" in fetch


def fetch_args():
    """numkeys, keys and arguments of one fetch of BATCH jobs of `default` (the worker's: 1 MiB, Sidekiq's dead limits)."""
    head = [len(FETCH_KEYS)] + FETCH_KEYS + [identity, BATCH]
    if not SIZED_FETCH:
        return head + ["default"]
    now = time.time()
    return head + [1048576, now, time.strftime("%Y-%m-%d", time.gmtime(now)), 10000, 15552000, "default"]

r = Redis(int(os.environ.get("REDIS_PORT", "6390")), 59)
fetch_sha = r.call("SCRIPT", "LOAD", fetch).decode()
settle_sha = r.call("SCRIPT", "LOAD", settle).decode()
identity = "bench-host:1:scriptcost"
working = "working:queue:default:" + identity
heartbeat = "reliable-fetcher-heartbeat-" + identity.replace(":", "-")  # Keys.fetcherHeartbeat
persistence = "appendonly %s, appendfsync %s" % (r.call("CONFIG", "GET", "appendonly")[1].decode(),
                                                 r.call("CONFIG", "GET", "appendfsync")[1].decode())


def evalsha_usec():
    return command_usec("evalsha")


def command_usec(*names):
    """Microseconds Redis spent in these commands since the last `CONFIG RESETSTAT` (commands a script calls are
    counted inside the script's own time too)."""
    stats = r.call("INFO", "commandstats").decode()
    total = 0
    for name in names:
        match = re.search(r"cmdstat_%s:calls=\d+,usec=(\d+)" % name, stats)
        total += int(match.group(1)) if match else 0
    return total


# Where the tree's plain acks go: through the settle script as one group (`working`, n, n raw jobs: the trees before
# the acknowledgement left Lua), or as ReliableQueue.acknowledge sends them (this tree and later).
SCRIPT_ACKS = "tonumber(ARGV[5])" in settle


def pipe(*commands):
    """Several commands in one round trip; their replies in order."""
    out = []
    for args in commands:
        out.append(b"*%d\r\n" % len(args))
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    r.sock.sendall(b"".join(out))
    return [r.read() for _ in commands]


def acknowledge(jobs, now, day):
    """Plain acks as the worker sends them: the settle script's group in older trees; in this one
    ReliableQueue.acknowledge's tail cut (WATCH of the owner's fetcher heartbeat, EXISTS of it, LRANGE of the last
    n + 32 entries, the cut planned here as TailCut plans it, then MULTI, LTRIM, RPUSH of the entries that stay, the
    processed counters, EXEC)."""
    if SCRIPT_ACKS:
        r.call("EVALSHA", settle_sha, 0, now, day, 10000, 15552000, 1, working, len(jobs), *jobs)
        return
    _, alive, region = pipe(["WATCH", heartbeat], ["EXISTS", heartbeat], ["LRANGE", working, -(len(jobs) + 32), -1])
    if alive != 1:
        sys.exit("script_cost: the heartbeat is gone (the worker would leave every ack to the settle script)")
    wanted = {}
    for job in jobs:
        wanted[job] = wanted.get(job, 0) + 1
    matched, found, newest = set(), 0, len(region)
    for k in range(len(region) - 1, -1, -1):
        if found == len(jobs):
            break
        if wanted.get(region[k], 0) > 0:
            wanted[region[k]] -= 1
            matched.add(k)
            found += 1
            newest = k
    length = len(region) - newest
    if found < len(jobs) or length - found > found:
        sys.exit("script_cost: an acknowledged job was not in the stretch read (the bench acknowledges the oldest)")
    kept = [region[k] for k in range(newest, len(region)) if k not in matched]
    minute = int(now // 60) % 1440
    writes = [["MULTI"], ["LTRIM", working, 0, -(length + 1)]] + ([["RPUSH", working] + kept] if kept else []) + [
        ["INCRBY", "stat:processed", found], ["INCRBY", "stat:processed:" + day, found],
        ["EXPIRE", "stat:processed:" + day, 157680000], ["HINCRBY", "stat:minutely:processed:" + day, minute, found],
        ["EXPIRE", "stat:minutely:processed:" + day, 259200], ["EXEC"]]
    if pipe(*writes)[-1] is None:
        sys.exit("script_cost: the transaction aborted (nothing else writes the list here)")


def ack_usec():
    """Redis time of the acknowledgements: the settle script's, or the transaction's (EXEC's time holds the commands
    inside it; the LRANGE is outside). Neither holds the copy of replies to the socket (bench/redis-cpu.sh's does)."""
    return evalsha_usec() if SCRIPT_ACKS else command_usec("watch", "exists", "lrange", "multi", "exec")


def cpu_seconds():
    info = r.call("INFO", "cpu").decode()
    return sum(float(v) for v in re.findall(r"used_cpu_(?:sys|user):([\d.]+)", info))


template = '{"retry":true,"queue":"default","class":"Noop","args":[%d],"jid":"%024x","created_at":1764028800.0,"enqueued_at":1764028800.0}'


def preload():
    r.call("FLUSHDB")
    r.call("SET", heartbeat, "1")  # the worker's fetcher heartbeat, which the tail cut's transaction watches
    for start in range(0, N, 1000):
        r.call("LPUSH", "queue:default", *[template % (i, i) for i in range(start, min(N, start + 1000))])


figures = {"fetch_usec": [], "settle_usec": [], "fetch_rate": [], "settle_rate": [], "window_usec": [],
           "floor_usec": [], "lua_floor_usec": [], "window_cpu": []}
for run in range(RUNS):
    preload()
    r.call("CONFIG", "RESETSTAT")
    fetched = []
    began = time.perf_counter()
    while True:
        reply = r.call("EVALSHA", fetch_sha, *fetch_args())
        if not reply:
            break
        for chunk in reply[1::2]:  # [queue, [jobs…], …]
            fetched.extend(chunk)
    figures["fetch_rate"].append(N / (time.perf_counter() - began))
    figures["fetch_usec"].append(evalsha_usec() / N)
    fetch_lrange_usec = command_usec("lrange")  # inside the fetch script (counted in its time too)
    if len(fetched) != N:
        sys.exit("script_cost: fetched %d of %d" % (len(fetched), N))
    r.call("CONFIG", "RESETSTAT")
    now = time.time()
    day = time.strftime("%Y-%m-%d", time.gmtime(now))
    began = time.perf_counter()
    for start in range(0, N, BATCH):
        chunk = fetched[start:start + BATCH]
        acknowledge(chunk, now, day)
    figures["settle_rate"].append(N / (time.perf_counter() - began))
    figures["settle_usec"].append(ack_usec() / N)
    if r.call("LLEN", working) != 0 or int(r.call("GET", "stat:processed")) != N:
        sys.exit("script_cost: the settle script left jobs in flight or miscounted")

    # As a worker's drain goes: a fetch, then the acks of the batch fetched before it, in an order of their own
    # (the pool's threads finish a batch's jobs in any order), so about two batches are in flight at each ack.
    preload()
    shuffle = random.Random(run)
    r.call("CONFIG", "RESETSTAT")
    cpu_before = cpu_seconds()
    previous, settled = [], 0
    while True:
        reply = r.call("EVALSHA", fetch_sha, *fetch_args())
        current = [job for chunk in (reply or [])[1::2] for job in chunk]
        if previous:
            shuffle.shuffle(previous)
            acknowledge(previous, now, day)
            settled += len(previous)
        if not current:
            break
        previous = current
    figures["window_cpu"].append((cpu_seconds() - cpu_before) * 1e6 / N)
    # The acknowledgements' LRANGEs are those of this phase less the fetch script's own (as in the fetch phase above).
    outside = 0 if SCRIPT_ACKS else command_usec("watch", "exists", "multi", "exec") + command_usec("lrange") - fetch_lrange_usec
    figures["window_usec"].append((evalsha_usec() + outside) / N)
    if settled != N or r.call("LLEN", working) != 0 or int(r.call("GET", "stat:processed")) != N:
        sys.exit("script_cost: the windowed drain left jobs in flight or miscounted")

    # The floor of this layout: the same data moves as plain commands, no script — per batch the fetch's LRANGE of
    # the queue's tail, its LTRIM and one LPUSH of the batch into the in-flight list; the ack's LTRIM of the batch
    # off the in-flight list; the stats' INCRBY. A lower bound, not a design: done by a client the moves are not
    # atomic (a job is in neither list between the LTRIM and the LPUSH), which is why the worker uses a script.
    preload()
    r.call("CONFIG", "RESETSTAT")
    moved = 0
    while True:
        jobs = r.call("LRANGE", "queue:default", -BATCH, -1)
        if not jobs:
            break
        r.call("LTRIM", "queue:default", 0, -(len(jobs) + 1))
        r.call("LPUSH", working, *reversed(jobs))
        r.call("LTRIM", working, 0, -(len(jobs) + 1))
        r.call("INCRBY", "stat:processed", len(jobs))
        moved += len(jobs)
    figures["floor_usec"].append(command_usec("lrange", "ltrim", "lpush", "incrby") / N)
    if moved != N or r.call("LLEN", working) != 0:
        sys.exit("script_cost: the floor's moves lost jobs")


    # The floor of this layout done by scripts: the payloads cross into Lua as ours must — the fetch's LRANGE of the
    # queue's tail, and the ack's arguments (the raw jobs, matched byte for byte) and its LRANGE of the in-flight
    # tail — with nothing else: no order kept, no matching, no stats but one INCRBY (each ack trims the batch the
    # fetch just moved). Redis's Lua hashes every byte of each string that enters it (luaS_newlstr), so this is
    # what any fetch and payload-matching acknowledgement through Lua costs here; ours minus this is our scripts'
    # own logic.
    preload()
    floor_fetch = r.call("SCRIPT", "LOAD", """
        local jobs = redis.call('LRANGE', KEYS[1], -tonumber(ARGV[1]), -1)
        if #jobs == 0 then return jobs end
        redis.call('LTRIM', KEYS[1], 0, -(#jobs + 1))
        redis.call('LPUSH', KEYS[2], unpack(jobs))
        return jobs""").decode()
    floor_ack = r.call("SCRIPT", "LOAD", """
        local region = redis.call('LRANGE', KEYS[1], -#ARGV, -1)
        redis.call('LTRIM', KEYS[1], 0, -(#ARGV + 1))
        redis.call('INCRBY', 'stat:processed', #region)
        return #region""").decode()
    r.call("CONFIG", "RESETSTAT")
    moved = 0
    while True:
        jobs = r.call("EVALSHA", floor_fetch, 2, "queue:default", working, BATCH)
        if not jobs:
            break
        moved += r.call("EVALSHA", floor_ack, 1, working, *jobs)
    figures["lua_floor_usec"].append(evalsha_usec() / N)
    if moved != N or r.call("LLEN", working) != 0:
        sys.exit("script_cost: the Lua floor's moves lost jobs")


def line(name, unit, label):
    values = figures[name]
    fmt = (lambda v: "%.0f" % v) if max(values) >= 100 else (lambda v: "%.2f" % v)
    print("%s: median %s %s (min %s – max %s, %d runs)" % (label, fmt(statistics.median(values)), unit,
                                                          fmt(min(values)), fmt(max(values)), len(values)))


print("== redis %s; N=%d, batch %d" % (persistence, N, BATCH))
line("fetch_usec", "µs/job", "fetch script, Redis time")
line("settle_usec", "µs/job", "acknowledgement, Redis time (%s)" % ("the settle script" if SCRIPT_ACKS else "the tail cut's transaction"))
line("window_usec", "µs/job", "fetch + ack as a drain goes (acks of the batch before, shuffled), Redis time")
line("window_cpu", "µs/job", "   the same, Redis CPU (INFO cpu: with its networking, paced by this one Python client)")
line("floor_usec", "µs/job", "floor: the same moves as plain commands (LRANGE, LTRIM, LPUSH, LTRIM, INCRBY)")
line("lua_floor_usec", "µs/job", "floor through Lua: the payloads' crossings alone (fetch LRANGE; ack arguments + LRANGE)")
line("fetch_rate", "jobs/s", "fetch, one client, wall")
line("settle_rate", "jobs/s", "settle, one client, wall")
