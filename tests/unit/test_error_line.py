"""runtime/error_line.py: the line of an error's message a one-line report gives."""

from runtime import error_line

# A remote op's failure as TensorFlow words it (the shape of a parameter-server run's error).
REMOTE = ("""Graph execution error:

Detected at node 'Identity' defined at (most recent call last):
  File "train.py", line 3, in step
2 root error(s) found.
  (0) UNAVAILABLE: failed to connect to all addresses; last error: connection refused
<TAB> [[{{node Identity}}]]
  (1) CANCELLED: Function was cancelled before it was started
0 successful operations.
0 derived errors ignored. [Op:Identity] name: """).replace("<TAB>", "\t")


def test_tensorflow_s_first_root_error_not_its_bookkeeping():
    assert error_line.of(REMOTE) == (
        "UNAVAILABLE: failed to connect to all addresses; last error: connection refused")


def test_bookkeeping_alone_gives_the_last_line_that_says_something():
    assert error_line.of("Reading the table failed\n0 successful operations.\n"
                         "0 derived errors ignored. [Op:Identity] name:") == "Reading the table failed"


def test_any_other_message_gives_its_last_line():
    # A Beam error: the wrapped step's traceback first, its error last.
    beam = "Traceback (most recent call last):\n  File \"x.py\"\nValueError: column 'x' is empty"
    assert error_line.of(beam) == "ValueError: column 'x' is empty"
    assert error_line.of("one line") == "one line"
    assert error_line.of("") == ""
