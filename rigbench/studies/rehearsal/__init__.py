"""Loopback stand-ins for what a rig and the cloud around it answer, shared by ``rigbench study
rehearsal`` and the tests: the rehearsal runs the real provision steps over SSH on a machine that
is not a rig, and nothing here binds anything but 127.0.0.1.

    sshd.py   a private OpenSSH server for the current user (this machine's, or one unpacked from
              Debian packages by ``rehearsal_bundle.sh`` on a machine without one)
    hub.py    the Hugging Face hub: files by ``resolve`` URL with Range, redirects, model info
    imds.py   EC2's instance metadata (IMDSv2): tokens, and a spot notice switched on at will
    s3.py     moto's S3 server with a bucket (the ``rehearsal`` extra)
    stand_ins.py  the rig's user data run here, with stand-ins for systemctl and shutdown
    study.py  ``rigbench study rehearsal``: two rigs' lives through every provision step, timed
"""
