"""Which launches of a tuned kernel this process recorded as compile
requests (autotune/binaries/compile_requests.py): in a run that writes a
cache (a dump, an update), every launch of a winner whose arguments
specialise differently (a pointer or a stride divisible by 16 or not), so
the entry records each binary a GPU run needs."""
from autotune.binaries import compile_requests


def alignment(named):
    """What Triton's launcher specialises on beyond types: divisibility by
    16 of addresses and integers, and integers equal to 1."""
    marks = []
    for value in named.values():
        if hasattr(value, "data_ptr"):
            marks.append(value.data_ptr() % 16 == 0)
        elif isinstance(value, int) and not isinstance(value, bool):
            marks.append((value % 16 == 0, value == 1))
        else:
            marks.append(None)
    return tuple(marks)


class LaunchRecorder:
    def __init__(self, kernel):
        self.kernel = kernel
        self.seen = set()

    def note(self, session, key, named, config):
        mark = (key, config, alignment(named))
        if mark in self.seen:
            return
        self.seen.add(mark)
        request = compile_requests.request_for_launch(self.kernel, named,
                                                      config)
        if request is not None:
            session.note_compile_request(key, request)
