"""deploy/: the Kubernetes manifests pass kubernetes-validate's strict schemas (offline), the
validator does catch a broken manifest, and every flag the manifests give kvlm and sglang-router
is one those programs accept. Not run on a cluster (none here)."""
import glob
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("KVLM_BIN", os.path.join(ROOT, "build", "kvlm"))
MANIFESTS = sorted(glob.glob(os.path.join(ROOT, "deploy", "k8s", "*.yaml")))
VALIDATE = [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet"]


def test_manifests_pass_strict_schema_validation():
    assert len(MANIFESTS) >= 3
    out = subprocess.run(VALIDATE + MANIFESTS, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_validator_catches_a_broken_manifest(tmp_path):
    docs = list(yaml.safe_load_all(open(os.path.join(ROOT, "deploy", "k8s", "kvlm.yaml"))))
    docs[0]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pathh"] = "/health"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all(docs))
    out = subprocess.run(VALIDATE + [str(bad)], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "pathh" in out.stdout + out.stderr


def container_args(name):
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(open(path)):
            if doc and doc.get("kind") == "Deployment" and doc["metadata"]["name"] == name:
                return doc["spec"]["template"]["spec"]["containers"][0]["args"]
    raise AssertionError(f"no Deployment {name}")


def flags(args):
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def test_every_flag_in_the_manifests_is_one_the_programs_take():
    args = container_args("kvlm")
    assert args[0] == "serve"
    help_text = "".join(subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
                        for cmd in ([BIN, "--help"], [BIN, "serve", "--help"]))  # global options, serve's
    for f in flags(args):
        assert f + " " in help_text or f + "\n" in help_text, f"kvlm serve has no {f}"
    router_help = subprocess.run([sys.executable, "-m", "sglang_router.launch_router", "--help"], capture_output=True,
                                 text=True, timeout=60).stdout
    for f in flags(container_args("kvlm-router")):
        assert f in router_help, f"sglang-router has no {f}"
