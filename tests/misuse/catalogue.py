#!/usr/bin/env python3
"""Misuse catalogue: how kindling answers a user's mistakes, asserted case by case.

Every case runs a real program (kindling-run, hello_dist, dist_tutorial, cifar10) with a
mistake in its flags, environment, data or checkpoint, and must end with a non-zero exit
code, within the time limit (never a hang), with the expected words in its output (who,
what, the value seen, what to do). API misuse inside a program is asserted in the area
tests (e.g. tests/dist/serial_test.cpp MisuseGivesActionableErrors); this table covers
what a user meets from the command line and the environment.

A case may add checks: "absent", texts the output must not hold (a stack trace, a 309-digit
bound); "last", the expected text must be on the output's last line (not scrolled away);
"unprivileged", run by root without its power to read any folder (setpriv drops
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH), as a user meets a folder without permission.

  tests/misuse/catalogue.py --build build [--list] [-k substring]
"""
import argparse
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

# kindling-run --rdzv_backend etcd pointed at a program that is not etcd (formatted with "http": an
# HTTP server answering 501 to every request; "c10d": another node's kindling-run serving the c10d
# rendezvous, as when the nodes were given different --rdzv_backend), with a join timeout of 50 s.
ETCD_STRANGER = """
import http.server, socket, subprocess, sys, threading, time
run = "{build}/kindling-run"
if "%s" == "http":
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port, other = server.server_port, None
else:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    other = subprocess.Popen([run, "--nnodes", "2", "--rdzv_endpoint", "127.0.0.1:%%d" %% port, "--rdzv_id", "j",
                              "--rdzv_conf", "join_timeout=50", "/bin/true"], stderr=subprocess.DEVNULL)
    time.sleep(1)
code = subprocess.call([run, "--nnodes", "2", "--rdzv_backend", "etcd", "--rdzv_endpoint", "127.0.0.1:%%d" %% port,
                        "--rdzv_id", "j", "--rdzv_conf", "join_timeout=50", "/bin/true"])
if other:
    other.kill()
sys.exit(code)
"""

# (area, name, argv (first word: a program of the build), extra environment, expected text[, checks])
# Environment values of None remove the variable; checks: see the docstring. {python} is this
# interpreter.
CASES = [
    # ---- launcher flags: kindling-run ------------------------------------------------
    ("launcher", "nproc zero", ["kindling-run", "--nproc_per_node", "0", "/bin/true"], {},
     "--nproc_per_node must be at least 1"),
    ("launcher", "nproc runaway", ["kindling-run", "--nproc_per_node", "20000", "/bin/true"], {},
     "--nproc_per_node 20000 is more than 1024 processes on one node"),
    ("launcher", "two nodes no address", ["kindling-run", "--nnodes", "2", "/bin/true"], {},
     "--nnodes 2 needs --master_addr"),
    ("launcher", "node rank out of range", ["kindling-run", "--nnodes", "2", "--node_rank", "2", "--master_addr",
                                            "10.0.0.1", "/bin/true"], {},
     "--node_rank 2 is out of range for --nnodes 2 (use 0..1)"),
    ("launcher", "port out of range", ["kindling-run", "--master_port", "70000", "/bin/true"], {},
     "--master_port must be between 1 and 65535, got 70000"),
    ("launcher", "standalone with nnodes", ["kindling-run", "--standalone", "--nnodes", "2", "/bin/true"], {},
     "--standalone runs one node; it cannot be combined with --nnodes 2"),
    ("launcher", "standalone with port", ["kindling-run", "--standalone", "--master_port", "1234", "/bin/true"], {},
     "drop --master_addr/--master_port"),
    ("launcher", "range outside --nnodes", ["kindling-run", "--nproc_per_node", "1:4", "/bin/true"], {},
     "(only --nnodes takes an elastic range MIN:MAX)"),
    ("launcher", "elastic MIN > MAX", ["kindling-run", "--nnodes", "3:2", "--rdzv_endpoint", "node0", "--rdzv_id",
                                       "j", "/bin/true"], {},
     "--nnodes 3:2 has MIN greater than MAX; write the smallest world first (e.g. 2:3)"),
    ("launcher", "elastic without endpoint", ["kindling-run", "--nnodes", "1:2", "/bin/true"], {},
     "elastic --nnodes 1:2 needs --rdzv_endpoint HOST[:PORT]"),
    ("launcher", "torchrun's etcd-v2 backend", ["kindling-run", "--nnodes", "1:2", "--rdzv_backend", "etcd-v2",
                                                 "--rdzv_endpoint", "etcd1:2379", "--rdzv_id", "j", "/bin/true"], {},
     "kindling-run speaks etcd's v3 API: give --rdzv_backend etcd"),
    ("launcher", "etcd members that do not answer", ["kindling-run", "--nnodes", "1:2", "--rdzv_backend", "etcd",
                                                     "--rdzv_endpoint", "127.0.0.1:9,127.0.0.1:7", "--rdzv_id", "j",
                                                     "--rdzv_conf", "join_timeout=2", "/bin/true"], {},
     "no etcd member answered (127.0.0.1:9: Couldn't connect to server; 127.0.0.1:7"),
    ("launcher", "etcd endpoint is an HTTP server", ["python", "-c", ETCD_STRANGER % "http"], {},
     "not an etcd member: 127.0.0.1:"),
    ("launcher", "etcd endpoint is a c10d rendezvous", ["python", "-c", ETCD_STRANGER % "c10d"], {},
     "is a kindling-run rendezvous of --rdzv_backend c10d (it greeted 'KINDLING-RENDEZVOUS 1'): the nodes were "
     "given different --rdzv_backend"),
    ("launcher", "elastic without id", ["kindling-run", "--nnodes", "1:2", "--rdzv_endpoint", "node0", "/bin/true"],
     {}, "elastic mode on several nodes needs --rdzv_id ID"),
    ("launcher", "elastic with node rank", ["kindling-run", "--nnodes", "1:2", "--rdzv_endpoint", "node0",
                                            "--rdzv_id", "j", "--node_rank", "1", "/bin/true"], {},
     "in elastic mode the rendezvous assigns node ranks"),
    ("launcher", "unknown flag", ["kindling-run", "--bogus", "/bin/true"], {}, "unknown option '--bogus'",
     {"last": True, "absent": ["Exit status:"]}),
    ("launcher", "no program", ["kindling-run", "--nproc_per_node", "2"], {}, "no program given"),
    ("launcher", "program missing", ["kindling-run", "no-such-program-xyz"], {},
     "cannot execute 'no-such-program-xyz': not found or not executable"),
    ("launcher", "negative grace", ["kindling-run", "--grace_period", "-1", "/bin/true"], {},
     "--grace_period expects seconds (a number from 0 to 10000000, about 115 days), got '-1'", {"last": True}),
    ("launcher", "infinite grace", ["kindling-run", "--grace_period", "inf", "/bin/true"], {},
     "--grace_period expects seconds (a number from 0 to 10000000, about 115 days), got 'inf'"),
    ("launcher", "bad restarts", ["kindling-run", "--max_restarts", "x", "/bin/true"], {},
     "--max_restarts expects a non-negative integer, got 'x'"),
    ("launcher", "restarts of static nodes", ["kindling-run", "--nnodes", "2", "--master_addr", "127.0.0.1",
                                              "--max_restarts", "1", "/bin/true"], {},
     "--max_restarts 1 with --nnodes 2 and --master_addr (the static rendezvous) would restart each node's workers "
     "on their own"),
    ("launcher", "flag with value", ["kindling-run", "--standalone=1", "/bin/true"], {}, "--standalone takes no value"),
    ("launcher", "missing value", ["kindling-run", "--nproc_per_node"], {}, "--nproc_per_node needs a value"),
    ("launcher", "failing worker named", ["kindling-run", "--nproc_per_node", "2", "/bin/false"], {},
     "workers failed:\n  rank "),
    ("launcher", "first failure from error files", ["kindling-run", "--nproc_per_node", "2", "{build}/examples/"
                                                   "dist_tutorial/dist_tutorial", "train", "--data-dir", "{tmp}"], {},
     "first failure (from the error files): rank "),
    ("launcher", "torchrun reads error files", ["python", "{source}/tests/launch/torchrun_compat.py", "--monitor_interval",
                                                "0.2", "--nproc_per_node", "2", "--no_python",
                                                "{build}/examples/dist_tutorial/dist_tutorial", "train", "--data-dir",
                                                "{tmp}"], {},
     "traceback : kindling::Error: [rank "),
    # ---- environment ---------------------------------------------------------------------
    ("environment", "rank beyond world", ["hello_dist"], {"RANK": "2", "WORLD_SIZE": "2"},
     "RANK=2 is out of range for WORLD_SIZE=2; ranks are 0..1"),
    ("environment", "local rank alone", ["hello_dist", "--backend", "gloo"], {"LOCAL_RANK": "0"},
     "LOCAL_RANK=0 is set but RANK and WORLD_SIZE are not"),
    ("environment", "local rank above rank", ["hello_dist", "--backend", "gloo"],
     {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, "LOCAL_RANK=1 must be between 0 and RANK (0)"),
    ("environment", "unresolvable master", ["hello_dist", "--backend", "gloo"],
     {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "29999"},
     "MASTER_ADDR='no-such-host.invalid' does not resolve to an address"),
    ("environment", "empty master", ["hello_dist", "--backend", "gloo"],
     {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "", "MASTER_PORT": "29999"}, "MASTER_ADDR is empty"),
    ("environment", "port zero", ["hello_dist", "--backend", "gloo"],
     {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"},
     "port 0 is out of range; use a free TCP port between 1 and 65535"),
    ("environment", "port not a number", ["hello_dist", "--backend", "gloo"],
     {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "http"}, "MASTER_PORT"),
    ("environment", "bad stall timeout", ["hello_dist", "--backend", "gloo"],
     {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "KINDLING_STALL_TIMEOUT": "soon"},
     "KINDLING_STALL_TIMEOUT='soon' is not a number of seconds >= 0"),
    ("environment", "nccl without gpu", ["hello_dist", "--backend", "nccl"], {},
     "nccl backend is required but no cuda capable devices were found"),
    ("environment", "unknown backend", ["hello_dist", "--backend", "foo"], {},
     "unknown or unavailable backend 'foo'"),
    ("environment", "slurm batch step", ["hello_dist"], {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "2"},
     "runs in the batch step of Slurm job 77 (no SLURM_STEP_ID)"),
    ("environment", "mpi without mpirun", ["dist_tutorial", "p2p", "--backend", "mpi", "--nproc-per-node", "2"], {},
     "the mpi backend cannot start its own processes"),
    ("environment", "serial with processes", ["dist_tutorial", "p2p", "--backend", "serial", "--nproc-per-node", "2"],
     {}, "backend is 'serial', so argument 'nproc_per_node' should not be given either"),
    ("environment", "p2p alone", ["dist_tutorial", "p2p", "--backend", "serial"], {},
     "dist_tutorial p2p needs at least 2 ranks, but the world has 1"),
    ("environment", "stale rank beside nproc", ["cifar10", "--nproc_per_node", "2"], {"RANK": "0", "WORLD_SIZE": "1"},
     "RANK=0 and WORLD_SIZE=1 are set in the environment without LOCAL_WORLD_SIZE"),
    ("environment", "stale world beside nproc", ["cifar10", "--nproc_per_node", "2"], {"RANK": "0", "WORLD_SIZE": "2"},
     "Unset RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT to start the processes here"),
    ("environment", "nproc against launcher", ["kindling-run", "--nproc_per_node", "2", "{build}/examples/cifar10/cifar10",
                                               "--nproc_per_node", "3"], {},
     "started by kindling-run with 2 processes on this node, but nproc_per_node=3"),
    ("environment", "serial in launched world", ["kindling-run", "--nproc_per_node", "2", "{build}/examples/hello_dist/"
                                                 "hello_dist", "--backend", "serial"], {},
     "of 2, but the serial backend runs it alone"),
    ("environment", "fingerprints on one rank", ["kindling-run", "--nproc_per_node", "2", "/bin/sh", "-c",
                                                 'if [ "$RANK" = 1 ]; then export KINDLING_DISTRIBUTED_DEBUG=DETAIL; '
                                                 'fi; exec {build}/examples/hello_dist/hello_dist --backend gloo'], {},
     "collective fingerprints (KINDLING_DISTRIBUTED_DEBUG or TORCH_DISTRIBUTED_DEBUG): 'DETAIL' on rank 1, 'off' on "
     "rank 0"),
    ("environment", "gloo and mpi ranks", ["mpirun", "-x", "KINDLING_STALL_TIMEOUT", "-np", "2", "/bin/sh", "-c",
                                           'b=mpi; if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then b=gloo; fi; '
                                           'exec {build}/examples/hello_dist/hello_dist --backend $b'],
     {"KINDLING_STALL_TIMEOUT": "3"},
     "MPI connecting the ranks of this job did not end within 3000 ms. MPI_Init waits for every rank without a "
     "timeout: a rank did not start the mpi backend"),
    ("environment", "mpi shm sizes differ", ["mpirun", "-np", "2", "/bin/sh", "-c",
                                             'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then export KINDLING_MPI_SHM_MIN_BYTES'
                                             '=100; fi; exec {build}/examples/hello_dist/hello_dist --backend mpi'], {},
     "KINDLING_MPI_SHM_MIN_BYTES: '(unset)' on rank 0, '100' on rank 1"),
    ("environment", "mpi shm size not a number", ["hello_dist"], {"KINDLING_MPI_SHM_SEGMENT": "1M"},
     "KINDLING_MPI_SHM_SEGMENT='1M' is not a whole number >= 4096"),
    ("environment", "bench without torch", ["python", "-I", "-S", "{source}/bench/cluster/bench_hosts.py", "--build",
                                            "{build}"], {},
     "bench_hosts.py: this interpreter, {python}, cannot import torch"),
    ("environment", "bench peer without torch", ["python", "{source}/bench/cluster/bench_hosts.py", "--build",
                                                 "{build}", "--python", "{tmp}/python-without-torch"], {},
     "bench_hosts.py: --python {tmp}/python-without-torch cannot run the Python DDP peer"),
    ("environment", "log level unknown", ["hello_dist"], {"KINDLING_LOG_LEVEL": "loud"}, "KINDLING_LOG_LEVEL"),
    ("environment", "debug level unknown", ["hello_dist"], {"KINDLING_DISTRIBUTED_DEBUG": "yes"},
     "KINDLING_DISTRIBUTED_DEBUG='yes' is not one of OFF, INFO, DETAIL"),
    ("environment", "port held by another job", ["kindling-run", "--nproc_per_node", "2", "--master_port", "{port}",
                                                 "{build}/examples/hello_dist/hello_dist", "--backend", "gloo"], {},
     "first failure (from the error files): rank 0 (local rank 0)"),
    # ---- data --------------------------------------------------------------------------
    ("data", "cifar10 data path missing", ["cifar10", "--data_path", "/no/such/data"], {}, "/no/such/data"),
    ("data", "data path is a file", ["cifar10", "--data_path", "{tmp}/garbage.pt"], {},
     "--data_path '{tmp}/garbage.pt' is not a folder"),
    ("data", "data path unreadable", ["cifar10", "--data_path", "{tmp}/locked"], {},
     "--data_path '{tmp}/locked' cannot be read (Permission denied)", {"unprivileged": True,
                                                                      "absent": ["filesystem error"]}),
    ("data", "data file in a loop of links", ["cifar10", "--data_path", "{tmp}/looped"], {},
     "'{tmp}/looped/data_batch_1.bin' cannot be examined (Too many levels of symbolic links)",
     {"absent": ["filesystem error"]}),
    ("data", "learning rate nan", ["cifar10", "--learning_rate", "nan"], {},
     "--learning_rate: got 'nan'; expected a finite number above 0", {"absent": ["Exception raised from"]}),
    ("data", "fashion-mnist folder empty", ["dist_tutorial", "train", "--backend", "serial", "--data-dir", "{tmp}"], {},
     "{tmp}"),
    ("data", "epochs zero", ["cifar10", "--num_epochs", "0"], {}, "--num_epochs"),
    ("data", "sharding with a comm hook", ["cifar10", "--sharding", "zero3", "--comm_hook", "fp16"], {},
     "--comm_hook excludes --sharding"),
    ("data", "diloco with sharding", ["cifar10", "--diloco_every", "8", "--sharding", "zero2"], {},
     "--sharding excludes --diloco_every"),
    ("data", "diloco settings without its period",
     ["cifar10", "--diloco_every", "0", "--diloco_fragments", "2", "--train_subset", "64", "--batch_size", "32"], {},
     "--diloco_ settings were given with --diloco_every 0 (DDP's average at every step), where they do nothing"),
    ("data", "processes without backend", ["cifar10", "--nproc_per_node", "2", "--backend", "none"], {},
     "--nproc_per_node 2 starts several processes, which need a backend"),
    ("data", "negative stall timeout", ["cifar10", "--stall_timeout", "-5"], {},
     "--stall_timeout: got '-5'; expected a number of seconds from 0 to 10000000"),
    ("data", "stall timeout nan", ["cifar10", "--stall_timeout", "nan"], {},
     "--stall_timeout: got 'nan'; expected a number of seconds from 0 to 10000000", {"absent": ["-922337203685"]}),
    ("data", "stall timeout infinite", ["cifar10", "--stall_timeout", "inf"], {},
     "--stall_timeout: got 'inf'; expected a number of seconds from 0 to 10000000", {"absent": ["17976931348623"]}),
    ("data", "tutorial stall timeout nan", ["dist_tutorial", "--stall-timeout", "nan"], {},
     "--stall-timeout: got 'nan'; expected a number of seconds from 0 to 10000000"),
    ("data", "restarts out of range", ["cifar10", "--max_restarts", "-1"], {}, "--max_restarts"),
    ("data", "config file missing", ["cifar10", "--config", "/no/such/config.toml"], {}, "/no/such/config.toml"),
    ("data", "config key misspelt", ["cifar10", "--config", "{tmp}/typo.toml"], {},
     "the configuration file (--config) sets 'bach_size', which is not an option of cifar10"),
    ("data", "data path in a loop of links", ["cifar10", "--data_path", "{tmp}/loop/data"], {},
     "--data_path '{tmp}/loop/data' cannot be examined (Too many levels of symbolic links)"),
    ("data", "output path under a file", ["cifar10", "--output_path", "{tmp}/garbage.pt/out", "--train_subset", "64"],
     {}, "--output_path '{tmp}/garbage.pt/out': kindling::handlers::open_run_folder: cannot create the directory"),
    ("data", "tutorial port out of range", ["dist_tutorial", "--master-port", "70000"], {}, "--master-port"),
    # ---- checkpoints -------------------------------------------------------------------------
    ("checkpoint", "resume from nothing", ["cifar10", "--resume_from", "/no/such/checkpoint.pt"], {},
     "--resume_from '/no/such/checkpoint.pt' is not a file"),
    ("checkpoint", "resume from garbage", ["cifar10", "--resume_from", "{tmp}/garbage.pt"], {},
     "{tmp}/garbage.pt"),
    ("checkpoint", "resume from empty file", ["cifar10", "--resume_from", "{tmp}/empty.pt"], {}, "{tmp}/empty.pt"),
    ("checkpoint", "resume from python's torch.save", ["cifar10", "--resume_from", "{tmp}/python.pt"], {},
     "is a torch.save archive whose pickle LibTorch's reader cannot rebuild"),
    ("checkpoint", "resume from legacy torch.save", ["cifar10", "--resume_from", "{tmp}/legacy.pt"], {},
     "is in torch.save's legacy format"),
    ("checkpoint", "resume from a cut archive", ["cifar10", "--resume_from", "{tmp}/cut.pt"], {},
     "is an incomplete torch.save archive (truncated or corrupt"),
]

PROGRAMS = {"python": None, "kindling-run": "kindling-run", "hello_dist": "examples/hello_dist/hello_dist",
            "dist_tutorial": "examples/dist_tutorial/dist_tutorial", "cifar10": "examples/cifar10/cifar10",
            "mpirun": "mpirun"}


def make_inputs(tmp):
    """The files the cases read: garbage, an empty file, a config with a misspelt key, a loop
    of symbolic links, a folder without permissions, a folder whose data_batch_1.bin is a loop
    of links, an interpreter without site packages (no torch), checkpoints written by Python's
    torch.save (current and legacy formats) and a cut copy of one."""
    with open(os.path.join(tmp, "garbage.pt"), "wb") as f:
        f.write(b"this is not a checkpoint" * 10)
    open(os.path.join(tmp, "empty.pt"), "wb").close()
    with open(os.path.join(tmp, "typo.toml"), "w") as f:
        f.write("num_epochs = 1\nbach_size = 16\n")
    os.symlink(os.path.join(tmp, "loop"), os.path.join(tmp, "loop"))
    os.mkdir(os.path.join(tmp, "locked"), 0o000)
    os.chmod(os.path.join(tmp, "locked"), 0o000)  # mkdir's mode is masked by the umask only
    os.mkdir(os.path.join(tmp, "looped"))
    os.symlink(os.path.join(tmp, "looped", "data_batch_1.bin"), os.path.join(tmp, "looped", "data_batch_1.bin"))
    with open(os.path.join(tmp, "python-without-torch"), "w") as f:
        f.write('#!/bin/sh\nexec %s -I -S "$@"\n' % shlex.quote(sys.executable))
    os.chmod(os.path.join(tmp, "python-without-torch"), 0o755)
    script = ("import collections, sys, torch\n"
              "state = {'model': collections.OrderedDict(w=torch.ones(2), b=torch.zeros(1)), 'trainer': {'a': 1, 'b': 2}}\n"
              "torch.save(state, sys.argv[1] + '/python.pt')\n"
              "torch.save(state, sys.argv[1] + '/legacy.pt', _use_new_zipfile_serialization=False)\n"
              "data = open(sys.argv[1] + '/python.pt', 'rb').read()\n"
              "open(sys.argv[1] + '/cut.pt', 'wb').write(data[:len(data) // 2])\n")
    subprocess.run([sys.executable, "-c", script, tmp], check=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def held_port():
    """A listening socket on a free port, as another job's rendezvous would hold it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


def program_argv(argv, build, tmp, port, checks):
    """A case's argv ready to run: placeholders filled, the program found in the build, a free
    rendezvous port for launchers, setpriv in front for an "unprivileged" case run by root.
    None when that case cannot run here (root without setpriv)."""
    source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    argv = [a.replace("{tmp}", tmp).replace("{build}", build).replace("{source}", source).replace("{port}", port)
            for a in argv]
    if argv[0] == "mpirun":
        argv[1:1] = ["--allow-run-as-root", "--oversubscribe"]
    else:
        # Launchers host their rendezvous on port 29500 unless told: a free one instead, so
        # that a case never meets another test's job (CTest runs two at a time). Elastic
        # rendezvous (--rdzv_endpoint) choose the workers' ports themselves.
        launcher = argv[0] == "kindling-run" or any(a.endswith("torchrun_compat.py") for a in argv[:2])
        if launcher and not any(a.startswith(("--master_port", "--standalone", "--rdzv_endpoint")) for a in argv):
            at = 1 if argv[0] == "kindling-run" else 2
            argv[at:at] = ["--master_port", free_port()]
        argv[0] = sys.executable if PROGRAMS[argv[0]] is None else os.path.join(build, PROGRAMS[argv[0]])
    if checks.get("unprivileged") and os.geteuid() == 0:
        if not shutil.which("setpriv"):
            return None
        argv = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"] + argv
    return argv


def answered(code, out, expect, checks):
    """Whether a run answered as a case expects: a non-zero exit, the expected text (on the
    last line with "last") and none of the "absent" texts."""
    lines = out.strip().splitlines()
    where = (lines[-1] if lines else "") if checks.get("last") else out
    return code not in (None, 0) and expect in where and not any(a in out for a in checks.get("absent", []))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--list", action="store_true", help="print the cases and exit")
    p.add_argument("-k", default="", help="run only cases whose name contains this")
    args = p.parse_args()
    args.build = os.path.abspath(args.build)
    if args.list:
        for area, name, argv, env, expect, *_ in CASES:
            print(f"{area:<12} {name:<28} {' '.join(argv)}  ->  {expect}")
        print(f"{len(CASES)} cases")
        return 0
    tmp = tempfile.mkdtemp(prefix="kindling-misuse-")
    make_inputs(tmp)
    holder = held_port()
    port = str(holder.getsockname()[1])
    failed = skipped = 0
    for area, name, argv, env, expect, *more in CASES:
        if args.k not in name:
            continue
        checks = more[0] if more else {}
        argv = program_argv(argv, args.build, tmp, port, checks)
        if argv is None:
            skipped += 1
            print(f"skip {area:<12} {name:<28} root reads any folder, and setpriv (util-linux) to drop that is missing")
            continue
        expect = expect.replace("{tmp}", tmp).replace("{python}", sys.executable)
        full_env = dict(os.environ)
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID",
                  "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "KINDLING_STALL_TIMEOUT",
                  "KINDLING_DISTRIBUTED_DEBUG", "TORCH_DISTRIBUTED_DEBUG", "TORCHELASTIC_RESTART_COUNT"):
            full_env.pop(k, None)
        full_env.update({k: v for k, v in env.items()})
        full_env["KINDLING_LOG_LEVEL"] = full_env.get("KINDLING_LOG_LEVEL", "info")
        start = time.monotonic()
        try:
            r = subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=60, cwd=tmp)
            code, out = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            code, out = None, "(killed after 60 s: a hang) " + str(e.stdout or "") + str(e.stderr or "")
        seconds = time.monotonic() - start
        ok = answered(code, out, expect, checks)
        print(f"{'ok  ' if ok else 'FAIL'} {area:<12} {name:<28} exit {code} in {seconds:.1f} s")
        if not ok:
            failed += 1
            print(f"     expected {expect!r} and a non-zero exit {checks or ''}; got:\n" +
                  "\n".join("     | " + line for line in out.splitlines()[-15:]))
    holder.close()
    os.chmod(os.path.join(tmp, "locked"), 0o700)  # so that a user other than root can remove it
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(CASES) - failed - skipped} of {len(CASES)} misuse cases answered as expected"
          f"{f', {skipped} skipped' if skipped else ''}" if not args.k else "")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
