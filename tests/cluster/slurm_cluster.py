"""Slurm on the namespace cluster: slurmctld on host 0, one slurmd per host, each in its
host's network namespace with its own name and address, so that srun on host 0 places
tasks on the other hosts through their slurmd as on a real cluster.

    with cluster.Cluster(hosts=2) as c, SlurmCluster(c) as s:
        s.srun(["-N", "2", "--ntasks-per-node", "2", "hostname"])

Authentication is auth/none and cred/none: the daemons of this one machine need no munge
key (a real cluster runs munge). The daemons run in the foreground as children of this
process and end with it; the cluster's teardown kills whatever is left in its namespaces.
"""
import os
import shutil
import subprocess
import tempfile
import time

import cluster


class SlurmCluster:
    def __init__(self, c, cpus_per_host=2):
        self.c = c
        self.cpus = cpus_per_host
        self.dir = None
        self.daemons = []

    def config(self):
        nodes = "".join(f"NodeName={cluster.hostname(k)} NodeAddr={self.c.address(k)} CPUs={self.cpus} "
                        f"Sockets=1 CoresPerSocket={self.cpus} ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN\n"
                        for k in range(self.c.hosts))
        d = self.dir
        return (f"ClusterName=kdlcluster\nSlurmctldHost={cluster.hostname(0)}({self.c.address(0)})\n"
                "SlurmUser=root\nSlurmdUser=root\nAuthType=auth/none\nCredType=cred/none\nMpiDefault=none\n"
                "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n"
                "SelectTypeParameters=CR_Core\nSlurmdParameters=config_overrides\nReturnToService=2\n"
                "InactiveLimit=0\nKillWait=5\nMinJobAge=300\nMailProg=/bin/true\n"
                "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
                f"JobCompType=jobcomp/none\nStateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool-%n\n"
                f"SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd-%n.pid\n"
                f"SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd-%n.log\n" + nodes +
                "PartitionName=all Nodes=" + ",".join(cluster.hostname(k) for k in range(self.c.hosts)) +
                " Default=YES MaxTime=INFINITE State=UP\n")

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="kindling-slurm-cluster-")
        os.makedirs(os.path.join(self.dir, "state"))
        self.conf = os.path.join(self.dir, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(self.config())
        quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for k in range(self.c.hosts):
            os.makedirs(os.path.join(self.dir, "spool-" + cluster.hostname(k)))
        self.daemons.append(self.c.popen_on(0, ["slurmctld", "-D", "-c", "-i", "-f", self.conf], **quiet))
        for k in range(self.c.hosts):  # slurmd needs the cgroup mounts of /sys
            argv = self.c.command_keeping_sys(k, ["slurmd", "-D", "-f", self.conf, "-N", cluster.hostname(k)])
            self.daemons.append(subprocess.Popen(argv, **quiet))
        try:
            self.wait_idle(60)
        except Exception:
            self.__exit__()
            raise
        return self

    def wait_idle(self, limit):
        deadline = time.monotonic() + limit
        states = ""
        while time.monotonic() < deadline:
            r = self.c.run_on(0, ["env", "SLURM_CONF=" + self.conf, "sinfo", "-h", "-N", "-o", "%N %T"],
                              capture_output=True, text=True, timeout=20)
            states = r.stdout.strip()
            lines = states.splitlines()
            if len(lines) == self.c.hosts and all(line.split()[1] == "idle" for line in lines):
                return
            if any(d.poll() is not None for d in self.daemons):
                break
            time.sleep(0.3)
        logs = ""
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name)) as f:
                    logs += f"---- {name}\n" + "".join(f.readlines()[-15:])
        raise RuntimeError(f"the Slurm cluster's nodes are not idle after {limit} s (sinfo: {states!r}):\n{logs}")

    def __exit__(self, *exc):
        for d in self.daemons:
            d.terminate()
        for d in self.daemons:
            try:
                d.wait(timeout=10)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()
        self.daemons = []
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def srun(self, argv, timeout=180):
        """srun on host 0 with `argv` (options, then the program); (exit code, output)."""
        r = self.c.run_on(0, ["env", "SLURM_CONF=" + self.conf, "srun"] + argv, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
        return r.returncode, r.stdout
