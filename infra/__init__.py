"""Stage: infra, the Pulumi program that gets a GPU rig on AWS and tears it down.

    __main__.py    what Pulumi runs (``main: infra/``); only calls program.deploy()
    program.py     config -> checks and look-ups -> one GpuRig -> stack outputs
    stack_config.py  every config key, read and validated in one place (RigConfig)
    placement.py   AZ choice (``az: cheapest``), offerings check, default-VPC subnet
    gpu_rig.py     the GpuRig component owning key pair, security group and instance
    user_data.py   renders templates/*.sh into the instance's cloud-init user data
    orphans.py     rigbench-tagged resources still alive in a region (``rigbench orphans``)

Imports only the base (``core``): the instance-type table is core/instance_types.py.
"""
