"""Stage: answer quality — ask a question set of a server and grade every reply.

    generator.py  the project's own seeded arithmetic word problems (exact answers)
    gsm8k.py      GSM8K's test split from the Hugging Face hub as a question file
    grading.py    the answer read from a reply, the grade, and the reply's failure kinds
    fewshot.py    completion prompts for base models: seeded exemplars that never hold a graded question
    requests.py   the request of one question and its reply, in chat or completion mode
    eval.py       one eval run against a URL: resumable, repeats compared token by token
    regrade.py    recorded replies graded again with the current grader

Imports only the base (``core``): it talks to a server over HTTP and to analysis through the
eval folder (``core.rundir.quality``).
"""
