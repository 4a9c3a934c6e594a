# r2s2r: `make demo` runs the main job, `make test` the tests. Both create .venv on first use
# and install the pinned dependencies (requirements/constraints.txt).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.r2s2r-installed
export MUJOCO_GL ?= egl

.PHONY: demo test bench colcon clean-venv

$(STAMP): pyproject.toml setup.py requirements/constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip==26.0.1"
	$(PY) -m pip install --quiet -c requirements/constraints.txt -e ".[test,colcon,drivers]"
	# openpi-client pins numpy<2: installed without its dependencies, as the tests' reference peer.
	$(PY) -m pip install --quiet --no-deps "openpi-client==0.1.2"
	touch $(STAMP)

# control_msgs and tf2_msgs, which have no PyPI wheels: generated and compiled into the venv from
# interfaces/ (about a minute the first time, then from the user's cache; nothing where a ROS
# install on AMENT_PREFIX_PATH provides them).
INTERFACES_STAMP := $(VENV)/.r2s2r-interfaces
$(INTERFACES_STAMP): $(STAMP) src/r2s2r/ros_interfaces.py $(shell find interfaces -type f)
	$(PY) -m r2s2r.cli interfaces build
	touch $(INTERFACES_STAMP)

demo: $(INTERFACES_STAMP)
	$(PY) -m r2s2r.cli demo --out demo_output

# lerobot 0.4.4, the reference peer the datasets r2s2r writes are loaded with (tests/test_lerobot_peer.py),
# in a folder of its own: it pins torch < 2.11, and this venv keeps torch 2.13. lerobot, accelerate and
# torchvision go in without their dependencies; what lerobot's dataset path needs beside them, with theirs.
PEER := .peer
PEER_STAMP := $(PEER)/.installed
$(PEER_STAMP): $(STAMP) requirements/peer.txt requirements/peer-no-deps.txt
	rm -rf $(PEER)
	$(PY) -m pip install --quiet --target $(PEER) -r requirements/peer.txt
	$(PY) -m pip install --quiet --target $(PEER) --no-deps -r requirements/peer-no-deps.txt
	touch $(PEER_STAMP)

# The suite in two pytest-xdist processes, a test file to each at a time (a file's fixtures are
# built once), the slowest files first (tests/conftest.py; xdist's own order, by test count, left
# the few long tests of the closed loop for last, with one worker idle), then the tests marked
# realtime one at a time: a hardware protocol's peer keeps link timeouts of tens of milliseconds,
# which a second test beside it on two cores can break. Both parts run whatever the first gives;
# the target fails if either failed.
TEST_WORKERS ?= 2

test: $(INTERFACES_STAMP) $(PEER_STAMP)
	$(PY) -m ruff check src tests bench
	status=0; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not realtime" || status=$$?; \
	$(PY) -m pytest -q -m realtime || status=$$?; \
	exit $$status

bench: $(STAMP)
	$(PY) bench/twin_step.py
	$(PY) bench/twin_node.py
	$(PY) bench/loop_latency.py
	$(PY) bench/camera_ingest.py --large-shm
	$(PY) bench/policy_loop.py
	$(PY) bench/driver_loop.py
	$(PY) bench/eval_throughput.py
	$(PY) bench/policy_eval_throughput.py
	$(PY) bench/stack_endurance.py
	$(PY) bench/search_efficiency.py
	$(PY) bench/replay.py

# The ROS 2 way, inside the same venv: colcon build + colcon test of the repository root.
colcon: $(INTERFACES_STAMP)
	. $(VENV)/bin/activate && colcon build --base-paths . --build-base build/colcon --install-base install \
	  && colcon test --base-paths . --build-base build/colcon --install-base install --event-handlers console_direct+ \
	  && colcon test-result --test-result-base build/colcon --verbose

clean-venv:
	rm -rf $(VENV)
