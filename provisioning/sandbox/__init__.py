"""The sandbox cloud: a moto server as the EC2 control plane and real local hosts for its instances.

Processes of one sandbox (one DEEPVM_HOME):
- the moto server (`python -m provisioning.sandbox.controlplane`: moto's, answering GetConsoleOutput from
  the hosts' consoles), on a loopback port, recorded in sandbox/sandbox.json;
- the supervisor (`python -m provisioning.sandbox.supervisor`), which reconciles EC2 with hosts: it boots
  a host for every running instance with a loopback address, kills the host of every instance that is no
  longer running, and terminates interrupted spot instances at their deadline;
- one host per running instance: `unshare --pid --mount` with a Python init as PID 1 that bind-mounts the
  host's own /etc/ssh, home and /tmp (and deepvm's code and Python read-only), makes the host's SSH key and
  prints it to the host's console, serves instance metadata on the instance's IP and runs sshd there.
"""
