"""rigbench stage: infra, the Pulumi program that gets a GPU rig on AWS and tears it down.

    __main__.py    what Pulumi runs (``main: infra/``); only calls program.deploy()
    program.py     config -> checks and look-ups -> one GpuRig -> stack outputs
    config.py      every config key, read and validated in one place (RigConfig)
    placement.py   AZ choice (``az: cheapest``), offerings check, default-VPC subnet
    gpu_rig.py     the GpuRig component owning key pair, security group and instance
    user_data.py   renders templates/*.sh into the instance's cloud-init user data

The instance-type table lives in rigbench/instance_types.py, shared with provision and analysis.
"""
