"""`plimsoll run` and `import plimsoll`, end to end (ctest label python; docs/python.md).

    ctest --test-dir build -L python
    PLIMSOLL_CLI=build/src/cli/plimsoll PYTHONPATH=build/python /usr/bin/python3 tests/python/run_test.py -v

Skips (exit 77, ctest's SKIP_RETURN_CODE) with a reason when numpy or the built module is missing; the torch
tests skip on their own when torch is missing.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("PLIMSOLL_CLI", os.path.join(SOURCE, "build/src/cli/plimsoll"))
PYTHON = sys.executable

def _built_with_libtorch():
    try:
        from plimsoll import _build
        return _build.TORCH_VERSION is not None
    except ImportError:
        return False


# The torch tests need Python's torch and a plimsoll built with libtorch (plimsoll_torch).
HAVE_TORCH = importlib.util.find_spec("torch") is not None and _built_with_libtorch()


def run(options, script_args, cwd=None):
    """Runs `plimsoll run OPTIONS --json FILE -- python3 ARGS`; returns (status, report dict or None, stderr)."""
    with tempfile.TemporaryDirectory() as folder:
        report_path = os.path.join(folder, "report.json")
        done = subprocess.run([CLI, "run", *options, "--json", report_path, "--", PYTHON, *script_args],
                              capture_output=True, text=True, cwd=cwd, timeout=300)
        report = None
        if os.path.exists(report_path):
            with open(report_path) as file:
                report = json.load(file)
        return done.returncode, report, done.stderr


def script(text):
    file = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    file.write(textwrap.dedent(text))
    file.close()
    return file.name


class SeedCase(unittest.TestCase):
    def test_leaky_generator_is_reported_with_its_line(self):
        # Within a few steps: 5 batches, 4 steps seen (the last step() begins the teardown, left out).
        status, report, _ = run([], [os.path.join(SOURCE, "examples/python/leaky_generator.py"), "--steps", "5"])
        self.assertEqual(status, 0)
        self.assertTrue(report["leak"], report)
        batch = 32 * 64 * 64 * 3 * 4
        self.assertLess(abs(report["leak_bytes_per_step"] - batch) / batch, 0.05)
        source = open(os.path.join(SOURCE, "examples/python/leaky_generator.py")).read().splitlines()
        line = next(i + 1 for i, text in enumerate(source) if "the batch that piles up" in text)
        self.assertTrue(report["leak_sites"][0].endswith(f"leaky_generator.py:{line}"), report["leak_sites"])

    def test_fixed_generator_has_no_leak(self):
        status, report, _ = run([], [os.path.join(SOURCE, "examples/python/fixed_generator.py"), "--steps", "12"])
        self.assertEqual(status, 0)
        self.assertFalse(report["leak"], report)
        self.assertEqual(report["leak_sites"], [])
        self.assertGreater(report["devices"][0]["peak_in_use_bytes"], 0)

    @unittest.skipUnless(HAVE_TORCH, "torch is not installed (python3-torch)")
    def test_torch_cnn_reaches_the_same_loss(self):
        cnn = os.path.join(SOURCE, "examples/python/torch_cnn.py")
        plain = subprocess.run([PYTHON, cnn, "--steps", "8"], capture_output=True, text=True, timeout=300)
        status, report, _ = run(["--quiet"], [cnn, "--steps", "8"])
        self.assertEqual(status, 0)
        self.assertTrue(report["hooks"]["torch"] and report["hooks"]["steps"], report)
        self.assertGreaterEqual(report["steps"], 6)
        self.assertGreater(report["devices"][0]["peak_in_use_bytes"], 1 << 20)
        with_plimsoll = subprocess.run([CLI, "run", "--quiet", "--", PYTHON, cnn, "--steps", "8"], capture_output=True,
                                       text=True, timeout=300)
        self.assertEqual(with_plimsoll.stdout, plain.stdout)


class Outputs(unittest.TestCase):
    def test_record_and_html_are_written(self):
        with tempfile.TemporaryDirectory() as folder:
            recording, html = os.path.join(folder, "run.plimsoll"), os.path.join(folder, "run.html")
            status, report, _ = run(["--record", recording, "--html", html],
                                    [os.path.join(SOURCE, "examples/python/leaky_generator.py"), "--steps", "8"])
            self.assertEqual(status, 0)
            self.assertEqual(report["recording"], recording)
            self.assertIn("<html", open(html).read(4096).lower())
            leaks = subprocess.run([CLI, "leaks", "--json", recording], capture_output=True, text=True)
            self.assertEqual(leaks.returncode, 0, leaks.stderr)
            # `plimsoll leaks` sees the last step too (the program's teardown); `run` leaves it out of its verdict.
            self.assertEqual(json.loads(leaks.stdout)["steps"], report["steps"] + 1)
            # The module returns what the command line prints.
            module = subprocess.run([PYTHON, "-c", f"import json, plimsoll; print(json.dumps(plimsoll.leaks({recording!r})))"],
                                    capture_output=True, text=True)
            self.assertEqual(json.loads(module.stdout), json.loads(leaks.stdout), module.stderr)
            replay = subprocess.run([CLI, "replay", "--json", "--device", "sim:1GiB", recording], capture_output=True,
                                    text=True)
            module = subprocess.run([PYTHON, "-c", "import json, plimsoll; "
                                     f"print(json.dumps(plimsoll.replay({recording!r}, device='sim:1GiB')))"],
                                    capture_output=True, text=True)
            cli_line, module_line = json.loads(replay.stdout.splitlines()[0]), json.loads(module.stdout)
            for timing in ("ns_per_op",):
                cli_line.pop(timing), module_line.pop(timing)
            for line in (cli_line, module_line):  # the step plan's packing time, measured like ns_per_op
                line.get("step_plan", {}).pop("pack_ms", None)
            self.assertEqual(module_line, cli_line)

    @unittest.skipUnless(HAVE_TORCH, "torch is not installed (python3-torch)")
    def test_cuda_limit_with_torch_1_says_why_it_is_off(self):
        status, report, _ = run(["--device", "cpu=1GiB,cuda:0=1GiB"], [script("import torch")])
        self.assertEqual(status, 0)
        import torch
        if int(torch.__version__.split(".")[0]) < 2:
            self.assertTrue(any(n.startswith("cuda hook off") and "PyTorch 2.0" in n for n in report["notes"]),
                            report["notes"])


class HostMemory(unittest.TestCase):
    def test_release_threshold_default_gives_way_to_the_environment_and_the_option_wins(self):
        probe = script("import plimsoll; print(plimsoll._plimsoll.device_summary('cpu'))")
        def summary(options, env):
            done = subprocess.run([CLI, "run", "--quiet", *options, "--", PYTHON, probe], capture_output=True,
                                  text=True, env={**os.environ, **env})
            return done.stdout
        self.assertIn("release threshold 256.00 MiB", summary([], {}))
        self.assertIn("release threshold 1.00 GiB", summary([], {"PLIMSOLL_RELEASE_THRESHOLD": "1GiB"}))
        self.assertIn("release threshold 8.00 MiB",
                      summary(["--release-threshold", "8MiB"], {"PLIMSOLL_RELEASE_THRESHOLD": "1GiB"}))

    def test_freed_host_memory_goes_back_to_the_kernel_by_default(self):
        rss = script("""
            import numpy as np
            def rss():
                for line in open("/proc/self/status"):
                    if line.startswith("VmRSS"):
                        return int(line.split()[1]) << 10
            a = np.ones(512 << 17)  # 512 MiB, over the default release threshold of 256 MiB
            before = rss()
            del a
            print(before - rss())
        """)
        freed = subprocess.run([CLI, "run", "--quiet", "--", PYTHON, rss], capture_output=True, text=True)
        kept = subprocess.run([CLI, "run", "--quiet", "--release-threshold", "64GiB", "--", PYTHON, rss],
                              capture_output=True, text=True)
        self.assertGreater(int(freed.stdout), 400 << 20, freed.stderr)
        self.assertLess(int(kept.stdout), 64 << 20, kept.stderr)


class BadInput(unittest.TestCase):
    def test_child_status_is_passed_on(self):
        status, report, _ = run([], [script("import sys; sys.exit(7)")])
        self.assertEqual(status, 7)
        self.assertEqual(report["exit_status"], 7)

    def test_unknown_option_is_125(self):
        done = subprocess.run([CLI, "run", "--bogus", "--", PYTHON, "-c", "pass"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 125, done.stderr)
        self.assertIn("--bogus", done.stderr)

    def test_bad_device_is_125_and_names_the_entry(self):
        done = subprocess.run([CLI, "run", "--device", "cpu4GiB", "--", PYTHON, "-c", "pass"], capture_output=True,
                              text=True)
        self.assertEqual(done.returncode, 125)
        self.assertIn("cpu4GiB", done.stderr)

    def test_limit_below_one_mapping_is_125(self):
        done = subprocess.run([CLI, "run", "--memory-limit", "1KiB", "--", PYTHON, "-c", "pass"], capture_output=True,
                              text=True)
        self.assertEqual(done.returncode, 125)
        self.assertIn("below 2.00 MiB", done.stderr)

    def test_missing_command_is_127(self):
        done = subprocess.run([CLI, "run", "--", "no-such-program-plimsoll"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 127)
        self.assertIn("no-such-program-plimsoll", done.stderr)

    def test_sigterm_to_run_reaches_the_program_and_the_report_still_comes(self):
        with tempfile.TemporaryDirectory() as folder:
            report_path, ready = os.path.join(folder, "report.json"), os.path.join(folder, "ready")
            sleeper = script(f"""
                import signal, sys, time
                signal.signal(signal.SIGTERM, lambda *a: sys.exit(43))
                open({ready!r}, "w").close()
                time.sleep(60)
            """)
            process = subprocess.Popen([CLI, "run", "--quiet", "--json", report_path, "--", PYTHON, sleeper])
            deadline = time.time() + 60
            while not os.path.exists(ready) and time.time() < deadline:
                time.sleep(0.05)
            process.terminate()
            self.assertEqual(process.wait(timeout=60), 43)
            with open(report_path) as file:
                self.assertEqual(json.load(file)["exit_status"], 43)

    def test_os_exit_keeps_the_report(self):
        status, report, _ = run([], [script("""
            import os, numpy as np
            import plimsoll
            kept = []
            for i in range(8):
                kept.append(np.ones(1 << 18))
                plimsoll.step()
            os._exit(3)
        """)])
        self.assertEqual(status, 3)
        self.assertFalse(report["stats_lost"])
        self.assertTrue(report["leak"], report)

    def test_killed_program_is_reported_from_the_recording(self):
        status, report, _ = run([], [script("""
            import os, signal, numpy as np
            import plimsoll
            kept = []
            for i in range(8):
                kept.append(np.ones(1 << 18))  # the line the report names
                plimsoll.step()
            os.kill(os.getpid(), signal.SIGKILL)
        """)])
        self.assertEqual(status, 128 + 9)
        self.assertEqual(report["signal"], 9)
        self.assertTrue(report["stats_lost"])
        self.assertTrue(any("signal 9" in note for note in report["notes"]), report["notes"])
        # The recording, cut short, still gives the verdict, the peak and the Python line.
        self.assertTrue(report["leak"], report)
        self.assertGreaterEqual(report["devices"][0]["peak_in_use_bytes"], 8 * (1 << 21))
        self.assertTrue(report["leak_sites"][0].endswith(".py:6"), report["leak_sites"])  # kept.append(...)

    def test_host_limit_raises_memory_error_with_the_report(self):
        status, report, _ = run(["--memory-limit", "64MiB"], [script("""
            import numpy as np
            try:
                np.ones(1 << 27)
            except MemoryError as error:
                assert "cpu" in str(error) and "limit" in str(error), str(error)
                raise SystemExit(5)
        """)])
        self.assertEqual(status, 5)
        self.assertEqual(len(report["ooms"]), 1, report)

    @unittest.skipUnless(HAVE_TORCH, "torch is not installed (python3-torch)")
    def test_tensor_out_of_memory_ends_in_the_report(self):
        status, report, stderr = run(["--memory-limit", "64MiB"], [script("""
            import torch
            torch.empty(1 << 28)  # 1 GiB of float32
        """)])
        self.assertEqual(status, 1)
        self.assertIn("plimsoll: out of memory", stderr)
        self.assertEqual(len(report["ooms"]), 1, report)
        self.assertIn("64.00 MiB", report["ooms"][0])

    def test_forked_child_is_noted(self):
        status, report, _ = run([], [script("""
            import os
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        """)])
        self.assertEqual(status, 0)
        self.assertEqual(report["forked_processes"], 1)
        self.assertTrue(any("not in this report" in note for note in report["notes"]))


    def test_started_python_process_is_governed_and_noted(self):
        status, report, _ = run(["--memory-limit", "64MiB"], [script("""
            import subprocess, sys
            # The started Python runs under the same limit: 128 MiB does not fit in 64 MiB.
            done = subprocess.run([sys.executable, "-c", "import numpy; numpy.ones(1 << 24)"], capture_output=True,
                                  text=True)
            assert done.returncode != 0 and "MemoryError" in done.stderr, done.stderr
        """)])
        self.assertEqual(status, 0)
        self.assertEqual(report["started_processes"], 1, report)


    def test_an_existing_sitecustomize_still_runs(self):
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "sitecustomize.py"), "w") as file:
                file.write("import builtins\nbuiltins.SITE_RAN = True\n")
            probe = script("""
                import builtins, numpy as np, plimsoll
                assert getattr(builtins, "SITE_RAN", False), "the user's sitecustomize did not run"
                assert plimsoll.installed()["numpy"], plimsoll.hook_notes()
            """)
            env = {**os.environ, "PYTHONPATH": folder + os.pathsep + os.environ.get("PYTHONPATH", "")}
            done = subprocess.run([CLI, "run", "--quiet", "--", PYTHON, probe], capture_output=True, text=True, env=env)
        self.assertEqual(done.returncode, 0, done.stderr)


class Module(unittest.TestCase):
    def test_pause_keeps_arrays_at_their_addresses_with_their_contents(self):
        done = subprocess.run([PYTHON, script("""
            import numpy as np, plimsoll
            plimsoll.configure("cpu", memory_limit="256MiB", growth="on_demand")
            assert plimsoll.install(numpy=True, torch=False, device="cpu")["numpy"], plimsoll.hook_notes()
            a = np.arange(1 << 20, dtype=np.float64)
            expected, address = float(a.sum()), a.ctypes.data
            assert plimsoll.pause("cpu", keep_contents=True) >= a.nbytes
            assert plimsoll.paused("cpu") and plimsoll.stats("cpu")["reserved_bytes"] == 0, plimsoll.stats("cpu")
            try:
                plimsoll.pause("cpu")
                raise SystemExit("paused twice without an error")
            except plimsoll.InvalidState as error:
                assert "paused already" in str(error), error
            plimsoll.resume("cpu")
            assert not plimsoll.paused("cpu") and a.ctypes.data == address and float(a.sum()) == expected
            try:
                plimsoll.resume("cpu")
                raise SystemExit("resumed twice without an error")
            except plimsoll.InvalidState as error:
                assert "not paused" in str(error), error
            assert issubclass(plimsoll.PauseError, plimsoll.Error)
            print("ok")
        """)], capture_output=True, text=True, env={**os.environ, "PLIMSOLL_LOG": "false"})
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("ok", done.stdout)

    def test_module_api(self):
        done = subprocess.run([PYTHON, script("""
            import json, numpy as np, tempfile, os
            config = os.path.join(tempfile.mkdtemp(), "plimsoll.json")
            json.dump({"devices": {"cpu": {"logical_devices": ["64MiB", "64MiB"]}}}, open(config, "w"))
            os.environ["PLIMSOLL_CONFIG"] = config  # read when the runtime starts, on first use
            import plimsoll
            assert plimsoll.install(numpy=True, torch=False, device="cpu/0")["numpy"], plimsoll.hook_notes()
            with plimsoll.device("cpu/1") as name, plimsoll.tag("batches"):
                a = np.ones(1 << 16)
            stats = plimsoll.stats("cpu/1")
            assert stats["tags"][0]["tag"] == "batches" and stats["in_use_bytes"] >= a.nbytes, stats
            try:
                plimsoll.configure("cpu/0", memory_limit="abc")
                raise SystemExit("no error")
            except plimsoll.InvalidArgument as error:
                assert isinstance(error, ValueError) and "abc" in str(error)
            assert issubclass(plimsoll.OutOfMemory, MemoryError)
            path = os.path.join(tempfile.mkdtemp(), "run.plimsoll")
            with plimsoll.record(path, devices=["cpu/0"], call_sites=True):
                kept = []
                for i in range(8):
                    kept.append(np.ones(1 << 16)); plimsoll.step()
            report = plimsoll.leaks(path)
            assert report["leak"] and report["groups"][0]["site"].endswith(".py:22"), report
            # Stats' counters as docs/python.md lists them: the heap's span covers what it mapped; nothing parked.
            assert stats["address_space_bytes"] >= stats["reserved_bytes"] > 0 and stats["parked_bytes"] == 0, stats
            # A host device has no streams: no device synchronization for them, no record_stream noted.
            assert stats["stream_fallbacks"] == 0 and stats["unrecorded_streams"] == 0, stats
            assert plimsoll.estimate.batch("64x64x3", 32)["batch_bytes"] == 32 * 64 * 64 * 3 * 4
            import threading  # a thread started after install() serves its arrays from plimsoll too
            made = []
            before = plimsoll.stats("cpu/0")["in_use_bytes"]
            worker = threading.Thread(target=lambda: made.append(np.ones(1 << 16)))
            worker.start(); worker.join()
            assert plimsoll.stats("cpu/0")["in_use_bytes"] >= before + made[0].nbytes, plimsoll.stats("cpu/0")
            assert plimsoll.replay(path, device="sim:1GiB")["ops"] > 0
        """)], capture_output=True, text=True, env={**os.environ, "PLIMSOLL_LOG": "false"})
        self.assertEqual(done.returncode, 0, done.stderr)


    def test_a_device_is_recorded_by_one_recording_at_a_time(self):
        # Under run, the program's own recording must not take the host device from the run's (its leak watch would
        # then see nothing); a bad device name leaves nothing attached.
        status, report, err = run([], [script('''
            import numpy as np, os, tempfile, plimsoll
            folder = tempfile.mkdtemp()
            try:
                plimsoll.record(os.path.join(folder, "mine.plimsoll"))
                raise SystemExit("a second recording of cpu was allowed")
            except plimsoll.InvalidState as error:
                assert "plimsoll run --record" in str(error), error
            kept = []
            for step in range(8):
                kept.append(np.ones(1 << 16)); plimsoll.step()
        ''')])
        self.assertEqual(status, 0, err)
        self.assertTrue(report["leak"], report)

    def test_run_plan_variable_reaches_import(self):
        # PLIMSOLL_RUN_PLAN (docs/configuration.md, run_plan): the device loads the plan before its first allocation
        # and stats() shows it; a missing plan is an error naming the file, not a crash.
        folder = tempfile.mkdtemp()
        plan = os.path.join(folder, "job.plan")
        with open(plan, "w") as out:
            json.dump({"format": "plimsoll-run-plan", "version": 1, "granule": 2097152, "limit": 67108864,
                       "covered_granules": 2, "through_step": 0, "source": "test", "fingerprint": [1048576, 2097152],
                       "entries": [[1048576, 0], [2097152, 2097152]]}, out)
        check = script("""
            import plimsoll
            run_plan = plimsoll.stats("cpu")["run_plan"]
            assert run_plan["loaded"] and run_plan["entries"] == 2, run_plan
            assert run_plan["mapped_ahead"] == 2 * 2097152, run_plan
        """)
        env = {**os.environ, "PLIMSOLL_LOG": "false", "PLIMSOLL_MEMORY_LIMIT": "64MiB"}
        done = subprocess.run([PYTHON, check], capture_output=True, text=True, env={**env, "PLIMSOLL_RUN_PLAN": plan})
        self.assertEqual(done.returncode, 0, done.stderr)
        missing = os.path.join(folder, "missing.plan")
        done = subprocess.run([PYTHON, check], capture_output=True, text=True, env={**env, "PLIMSOLL_RUN_PLAN": missing})
        self.assertNotEqual(done.returncode, 0)
        self.assertIn(missing, done.stderr)
        self.assertNotIn("terminate", done.stderr)

    def test_a_bad_device_name_leaves_no_device_recorded(self):
        done = subprocess.run([PYTHON, script('''
            import os, tempfile, plimsoll
            folder = tempfile.mkdtemp()
            try:
                plimsoll.record(os.path.join(folder, "bad.plimsoll"), devices=("cpu", "nowhere"))
                raise SystemExit("a bad device name was accepted")
            except plimsoll.Error:
                pass
            with plimsoll.record(os.path.join(folder, "good.plimsoll"), devices=("cpu",)):
                pass  # cpu was not left attached to the failed recording
        ''')], capture_output=True, text=True, env={**os.environ, "PLIMSOLL_LOG": "false"})
        self.assertEqual(done.returncode, 0, done.stderr)

    @unittest.skipUnless(HAVE_TORCH, "torch is not installed (python3-torch)")
    def test_device_and_tag_scopes_route_tensors(self):
        done = subprocess.run([PYTHON, script("""
            import json, os, tempfile
            config = os.path.join(tempfile.mkdtemp(), "plimsoll.json")
            json.dump({"devices": {"cpu": {"logical_devices": ["64MiB", "64MiB"]}}}, open(config, "w"))
            os.environ["PLIMSOLL_CONFIG"] = config
            import plimsoll, torch
            assert plimsoll.install(numpy=True, torch=True, device="cpu/0")["torch"], plimsoll.hook_notes()
            with plimsoll.device("cpu/1"), plimsoll.tag("activations"):
                t = torch.ones(1 << 18)
            a = torch.ones(1 << 18)
            tags = {tag["tag"]: tag["in_use_bytes"] for tag in plimsoll.stats("cpu/1")["tags"]}
            assert tags.get("activations", 0) >= t.numel() * 4, plimsoll.stats("cpu/1")
            assert plimsoll.stats("cpu/0")["in_use_bytes"] >= a.numel() * 4, plimsoll.stats("cpu/0")
        """)], capture_output=True, text=True, env={**os.environ, "PLIMSOLL_LOG": "false"})
        self.assertEqual(done.returncode, 0, done.stderr)

    @unittest.skipUnless(_built_with_libtorch(), "plimsoll was built without libtorch")
    def test_torch_other_than_the_built_libtorch_leaves_its_hook_off_and_says_why(self):
        done = subprocess.run([PYTHON, script("""
            import sys, types
            fake = types.ModuleType("torch")
            fake.__version__ = "1.12.1"
            sys.modules["torch"] = fake
            import plimsoll
            state = plimsoll.install(numpy=True, torch=True)
            assert state["numpy"] and not state["torch"], state
            notes = plimsoll.hook_notes()
            assert any(n.startswith("torch hook off") and "1.12.1" in n for n in notes), notes
        """)], capture_output=True, text=True, env={**os.environ, "PLIMSOLL_LOG": "false"})
        self.assertEqual(done.returncode, 0, done.stderr)


if __name__ == "__main__":
    if importlib.util.find_spec("numpy") is None:
        print("SKIP: numpy is not installed for", PYTHON, "(install python3-numpy)")
        sys.exit(77)
    if importlib.util.find_spec("plimsoll") is None:
        print("SKIP: the plimsoll module is not built (target _plimsoll) or not on PYTHONPATH")
        sys.exit(77)
    unittest.main()
