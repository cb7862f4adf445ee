"""Tests follow the code (issue 24 item 4): every module of ``notification_controller`` has a test file named
after it, laid out like the package, or an entry below saying which test covers it instead.

A module ``a/b/c.py`` is covered by any ``tests/**/test_c.py`` whose folders include ``a`` (so
``tests/unit/core/test_matching.py`` for ``core/matching.py``, ``tests/providers/test_slack.py`` for
``providers/slack.py``); a top-level module ``m.py`` by any ``tests/**/test_m.py``. The lists are checked both
ways: an entry must name an existing module and an existing test file, and an entry whose module has since got
its own test file is stale. Shrink them; do not grow them without a reason.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "notification_controller"
TESTS = ROOT / "tests"

# Tested through another module's tests or through the process (module -> the test file that covers it).
THROUGH: dict[str, str] = {
    # models: validated by the CRD tests and the bad-manifest battery
    "api/alert.py": "tests/unit/core/test_matching.py",
    "api/common.py": "tests/adversarial/test_bad_manifests.py",
    "api/crdgen.py": "tests/unit/test_crds.py",
    "api/hooks.py": "tests/unit/hooks/test_config.py",
    "api/objects.py": "tests/adversarial/test_bad_manifests.py",
    "api/provider.py": "tests/unit/test_crds.py",
    "api/receiver.py": "tests/unit/test_crds.py",
    # the composition root, settings and the servers around it: through the real process
    "app.py": "tests/integration/test_process.py",
    "settings.py": "tests/unit/test_cli.py",
    "runtime.py": "tests/unit/test_lazy_imports.py",
    "deadletters.py": "tests/integration/test_dead_letters_cli.py",
    "errors.py": "tests/adversarial/test_provider_faults.py",
    "server/health.py": "tests/integration/test_process.py",
    "server/metrics.py": "tests/integration/test_ops_metrics.py",
    # the reconcilers share one harness
    "controllers/alert.py": "tests/unit/test_reconcilers.py",
    "controllers/base.py": "tests/unit/test_reconcilers.py",
    "controllers/events.py": "tests/unit/test_reconcilers.py",
    "controllers/manager.py": "tests/unit/test_reconcilers.py",
    "controllers/provider.py": "tests/unit/test_reconcilers.py",
    "controllers/receiver.py": "tests/unit/test_reconcilers.py",
    # the CEL package is tested as one environment
    "core/cel/_loader.py": "tests/unit/core/test_cel.py",
    "core/cel/analysis.py": "tests/unit/core/test_cel.py",
    "core/cel/environment.py": "tests/unit/core/test_cel.py",
    "core/cel/functions.py": "tests/unit/core/test_cel.py",
    "core/cel/parser.py": "tests/unit/core/test_cel.py",
    "core/cel/values.py": "tests/unit/core/test_cel.py",
    "core/apiref.py": "tests/adversarial/test_api_path_injection.py",
    # re-export shims (issue 24 item 3 deletes them)
    "lib/buildinfo.py": "tests/unit/test_version.py",
    "lib/signing.py": "tests/integration/test_templates_app.py",
    "lib/deadlines.py": "tests/unit/store/test_memory.py",
    # the event path: the pipeline's pieces through the dispatcher's tests and the app (test_pipeline.py and
    # test_noise.py move to tests/unit/dispatch/ once THREAT_MODEL.md names them there)
    "dispatch/model.py": "tests/unit/dispatch/test_dispatcher.py",
    "dispatch/matcher.py": "tests/integration/test_event_path.py",
    "dispatch/rules.py": "tests/integration/test_event_path.py",
    "dispatch/notifiers.py": "tests/unit/dispatch/test_lanes.py",
    "dispatch/report.py": "tests/unit/dispatch/test_lanes.py",
    "dispatch/noise/filter.py": "tests/unit/core/test_noise.py",
    "dispatch/noise/flush.py": "tests/unit/core/test_noise.py",
    "dispatch/noise/groups.py": "tests/unit/core/test_noise.py",
    "dispatch/noise/repeat.py": "tests/unit/core/test_noise.py",
    "dispatch/noise/state.py": "tests/unit/core/test_noise.py",
    "dispatch/noise/statechange.py": "tests/unit/core/test_noise.py",
    "dispatch/noise/threads.py": "tests/unit/core/test_noise.py",
    "dispatch/noise/threshold.py": "tests/unit/core/test_noise.py",
    "dispatch/outbox/breaker.py": "tests/unit/dispatch/outbox/test_runner.py",
    "dispatch/outbox/policy.py": "tests/unit/dispatch/outbox/test_runner.py",
    "dispatch/outbox/queue.py": "tests/integration/test_durable_delivery.py",
    "dispatch/duplicates.py": "tests/unit/server/test_events.py",
    "dispatch/filtering.py": "tests/adversarial/test_regex_load.py",
    "dispatch/labels.py": "tests/integration/test_label_lookup_cache.py",
    "dispatch/templates.py": "tests/integration/test_templates_app.py",
    "hooks/chain.py": "tests/integration/test_hooks_dispatch.py",
    "hooks/client.py": "tests/unit/hooks/test_reconcile.py",
    "hooks/metrics.py": "tests/integration/test_hooks_dispatch.py",
    "hooks/registry.py": "tests/integration/test_hooks_dispatch.py",
    "hooks/stage.py": "tests/integration/test_hooks_dispatch.py",
    # kube/: the pure parts in one file, the rest against the real kube-apiserver
    "kube/client.py": "tests/unit/test_kube_pure.py",
    "kube/cluster.py": "tests/unit/test_kube_pure.py",
    "kube/informer.py": "tests/unit/test_kube_pure.py",
    "kube/leader.py": "tests/unit/test_kube_pure.py",
    "kube/library.py": "tests/e2e/test_kube_layer.py",
    "kube/metrics.py": "tests/e2e/test_ops_metrics_e2e.py",
    "kube/graphwatch.py": "tests/e2e/test_inhibition_e2e.py",
    # inhibition's parts are tested as one stage
    "dispatch/quiet/failing.py": "tests/unit/dispatch/quiet/test_inhibit.py",
    "dispatch/quiet/observe.py": "tests/unit/dispatch/quiet/test_inhibit.py",
    "dispatch/quiet/release.py": "tests/unit/dispatch/quiet/test_inhibit.py",
    # providers: shared pieces through the per-type modules and the conformance kit
    "providers/base.py": "tests/conformance/test_provider_conformance.py",
    "providers/options.py": "tests/conformance/test_provider_conformance.py",
    "providers/common.py": "tests/providers/test_formatting.py",
    "providers/aws.py": "tests/providers/test_sns.py",  # sns and sqs: test_sns.py, test_sqs.py
    "server/spans.py": "tests/integration/test_tracing.py",  # the ingest and webhook server spans
    "outbound/identity.py": "tests/integration/test_workload_identity.py",
    "providers/git/base.py": "tests/providers/test_git_family.py",
    "providers/git/changerequest.py": "tests/providers/test_git_family.py",
    "providers/git/forges.py": "tests/providers/test_bitbucket.py",
    "providers/git/githubapp.py": "tests/providers/test_github.py",
    # the type's module is named after the CRD type, not the Python module
    "providers/git/giteaprcomment.py": "tests/providers/test_giteapullrequestcomment.py",
    "providers/git/githubprcomment.py": "tests/providers/test_githubpullrequestcomment.py",
    "providers/git/gitlabmrcomment.py": "tests/providers/test_gitlabmergerequestcomment.py",
    # receivers: the registry through the matrix, shared pieces through the server tests
    "receivers/registry.py": "tests/conformance/test_receiver_conformance.py",
    "receivers/base.py": "tests/integration/test_receivers_real_formats.py",
    "receivers/oidc.py": "tests/receivers/test_generic_oidc.py",
    "receivers/guards.py": "tests/integration/test_receiver_server.py",
    "receivers/targets.py": "tests/integration/test_receiver_server.py",
    "receivers/signatures.py": "tests/adversarial/test_constant_time.py",
    "sandbox/protocol.py": "tests/unit/sandbox/test_pool.py",
    "sandbox/worker.py": "tests/unit/sandbox/test_pool.py",
    # store/: one contract suite over every backend
    "store/base.py": "tests/integration/test_state_contract.py",
    "store/instrumented.py": "tests/integration/test_state_instrumented.py",
}


def modules() -> list[str]:
    return sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )


def has_own_test(module: str, tests: list[Path]) -> bool:
    parts = Path(module).parts
    name = f"test_{Path(module).stem}.py"
    return any(t.name == name and (len(parts) == 1 or parts[0] in t.relative_to(TESTS).parts) for t in tests)


def test_every_module_has_a_test_file_or_says_which_test_covers_it() -> None:
    tests = sorted(TESTS.rglob("test_*.py"))
    missing = [m for m in modules() if not has_own_test(m, tests) and m not in THROUGH]
    assert missing == [], f"no tests/**/test_<module>.py and no entry in tests/unit/test_layout.py: {missing}"


def test_the_allow_lists_are_current() -> None:
    tests = sorted(TESTS.rglob("test_*.py"))
    for module, test in THROUGH.items():
        assert (PACKAGE / module).is_file(), f"{module} is gone: drop its entry"
        assert (ROOT / test).is_file(), f"{test} (for {module}) is gone"
        assert not has_own_test(module, tests), f"{module} has its own test file now: drop its entry"


def test_the_rule_sees_a_missing_test() -> None:
    """The rule itself: a module with no file named after it is found; one laid out like the package is not."""
    tests = [TESTS / "unit" / "core" / "test_matching.py", TESTS / "providers" / "test_slack.py"]
    assert has_own_test("core/matching.py", tests)
    assert has_own_test("providers/slack.py", tests)
    assert not has_own_test("dispatch/matching.py", tests)  # same name, another package
    assert not has_own_test("core/ratelimit.py", tests)
