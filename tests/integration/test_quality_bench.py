"""The quality benchmark runs end to end on a tiny BIRD excerpt (hashing embedder): it
builds every protocol on the real engines and prints its figures. The figures
themselves are measured by running the script (docs/quality.md), not asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "bird_tiny"


def test_quality_bench_runs_on_a_tiny_subset(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "quality_bench.py"),
            "--evalcases",
            str(TINY),
            "--embedder",
            "hashing",
            "--misses",
            "--cache",
            "out/vectors.json",  # a directory a fresh checkout lacks
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    cached = json.loads((tmp_path / "out" / "vectors.json").read_text())
    assert cached and all(len(vector) == 384 for vector in cached.values())
    document, _, table = proc.stdout.partition("\n| protocol")
    results = {r["protocol"]: r for r in json.loads(document)["results"]}
    questions = sorted(
        json.loads((TINY / "raw" / "bird_mini_dev" / "mini_dev_sqlite.json").read_text()),
        key=lambda q: q["question_id"],
    )
    assert results["reference"]["queries"] == sum(1 for q in questions if q["evidence"].strip())
    assert results["split"]["queries"] == sum(1 for q in questions[1::2] if q["evidence"].strip())
    assert results["reference+columns"]["queries"] == results["reference"]["queries"]
    # the columns are distractors: more cards, the same queries
    assert results["reference+columns"]["cards"] > results["reference"]["cards"]
    # the excerpt's questions with an Italian card and question (1471, 1472, 1479), each
    # asked in both languages of both workspaces
    crosslingual = results["crosslingual"]
    assert crosslingual["queries"] == 3 * 4
    methods = {"ours", "spec", "dense", "bm25", "rrf"}
    for result in results.values():
        assert methods <= set(result["methods"])
        for figures in result["methods"].values():
            assert figures["out_of_scope"] == 0
            assert all(0 <= figures[k] <= 1 for k in ("recall@1", "recall@5", "recall@10", "mrr"))
            assert figures["recall@1"] <= figures["recall@5"] <= figures["recall@10"]
    groups = crosslingual["methods"]["ours"]["groups"]
    halves = {g for g in groups if ":" not in g and not g.startswith("by command")}
    assert halves == {"cross test", "same test"}
    assert groups["cross test"]["queries"] == groups["same test"]["queries"] == 6
    named = results["split"]["methods"]["ours"]["groups"]["named all"]
    assert 0 < named["queries"] <= results["split"]["queries"]
    # every method, also as the agent asks: each expected card in its command's answer
    for result in results.values():
        for figures in result["methods"].values():
            by_command = figures["groups"]["by command all"]
            assert by_command["queries"] == result["queries"]
            assert by_command["recall@1"] <= by_command["recall@5"] <= by_command["recall@10"]
    split_parts = results["split"]["methods"]["ours"]["groups"]
    assert split_parts["by command named all"]["queries"] == named["queries"]
    # the rewritten protocols ask as many questions as the ones they rewrite
    for name in ("reference", "split"):
        for rewrite in ("long-titles", "surface"):
            assert results[f"{name}/{rewrite}"]["queries"] == results[name]["queries"]
    rows = sum(1 + len(m["groups"]) for r in results.values() for m in r["methods"].values())
    assert table.count("\n") == 2 + rows  # header, rule, a row per method and part


def test_a_sentence_is_named_when_a_word_of_its_title_is_in_the_question():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from quality_bench import Workspace, named_keys
    finally:
        sys.path.remove(str(ROOT / "bench"))
    from tht.memory.embedding.sparse import SparseEncoder

    space = Workspace("split-x", "x")
    for key, title in (
        ("charter", "Valid charter number"),
        ("staff", "Usually, administrators manage the school stuff"),
    ):
        space.keys[key] = len(space.documents)
        space.documents.append({"title": title})
    question = "Rank them by their Writing score, showing their charter numbers."
    encoder = SparseEncoder("en")
    # "charter numbers" names the first (stemmed), no word of the second is asked
    assert named_keys(question, ["charter", "staff", "unknown"], space, encoder) == ["charter"]
    assert named_keys("Which schools does Ricci Ulrich manage?", ["staff"], space, encoder) == [
        "staff"
    ]


def test_by_command_counts_a_card_only_in_the_answer_of_the_command_serving_its_family():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from quality_bench import summarize_by_command
    finally:
        sys.path.remove(str(ROOT / "bench"))

    command_of = {"rule": "rules", "clarification": "search"}
    answers = {
        # the rule is 2nd of `memory rules`; in `search` (widened) it would not count
        "rules": ["other-rule", "rule"],
        "search": ["rule", "a", "b", "c", "d", "e", "clarification"],
    }
    figures = summarize_by_command([(["rule", "clarification"], answers)], command_of)
    assert figures == {"recall@1": 0.0, "recall@5": 0.5, "recall@10": 1.0, "mrr": 0.5}
    missing = {"rules": [], "search": ["rule"]}
    assert summarize_by_command([(["rule"], missing)], command_of)["recall@10"] == 0.0


def test_a_missing_bird_folder_is_a_usage_error_not_a_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "quality_bench.py"), "--evalcases", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "BIRD Mini-Dev is not there" in proc.stderr and "--evalcases" in proc.stderr
    assert "Traceback" not in proc.stderr


def _bench() -> object:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import quality_bench
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return quality_bench


def test_surface_forms_rewrite_a_question_by_written_rules_the_same_way_every_run():
    bench: Any = _bench()
    question = 'What is the average number of posts of user "csgillespie" in 2010 with 12 votes?'
    rewritten = bench.surface_form(question)
    assert rewritten == bench.surface_form(question)  # seeded: the same every run
    # abbreviations and numbers as words always; the quoted value and the year untouched
    assert "avg" in rewritten and "no." in rewritten and "twelve" in rewritten
    assert '"csgillespie"' in rewritten and "2010" in rewritten
    assert "average" not in rewritten and " 12 " not in rewritten
    # the grammatical number of nouns flips by the seeded draw: another seed, another draw
    draws = {
        bench.surface_form("List the schools, drivers and posts of the teams", s) for s in range(20)
    }
    assert len(draws) > 1
    assert bench.toggle_number("schools") == "school" and bench.toggle_number("body") == "bodies"
    assert bench.toggle_number("matches") == "match" and bench.toggle_number("race") == "races"


def test_long_titles_title_each_evidence_card_with_the_first_80_characters_of_its_text():
    bench: Any = _bench()
    questions, catalogs = bench.load_bird(TINY)
    databases = sorted({q["db_id"] for q in questions})
    concise = bench.split_protocol(questions, catalogs, databases, None)
    long = bench.PROTOCOLS["split/long-titles"](questions, catalogs, databases, None)
    for plain, titled in zip(concise, long, strict=True):
        assert titled.id == f"{plain.id}-lt" and titled.cases == plain.cases
        evidence = set(titled.keys.values())
        for n, (before, after) in enumerate(zip(plain.documents, titled.documents, strict=True)):
            if n in evidence:
                assert after["title"] == after["content"][:80].rstrip()
                assert after["content"] == before["content"]
            else:  # the columns' cards keep their titles
                assert after == before


@pytest.mark.parametrize(
    "bench",
    ["quality_bench.py", "benchmark_run_bench.py", "weak_recall_bench.py", "agent_answer_bench.py"],
)
def test_without_a_bird_folder_the_benches_say_how_to_name_one(bench):
    # the data is not in the repository: no default path, a usage error naming the
    # option and the variable
    env = {k: v for k, v in os.environ.items() if k != "THT_EVALCASES"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / bench)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--evalcases" in proc.stderr and "THT_EVALCASES" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_bird_folder_may_come_from_the_environment(tmp_path):
    env = {**os.environ, "THT_EVALCASES": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "quality_bench.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2
    assert f"{tmp_path}/raw/bird_mini_dev/mini_dev_sqlite.json" in proc.stderr
