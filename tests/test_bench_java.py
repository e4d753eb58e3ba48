"""bench/bench_java.py's harness preparation, without a JVM: the Java sources it compiles
against each kafka-clients layout."""

import re
import sys
from pathlib import Path

# appended, not first: bench/ has a conftest.py of its own, which must not shadow tests/conftest.py
# for a later module's `from conftest import ...` (test_security_kafka's broker fixture)
sys.path.append(str(Path(__file__).resolve().parents[1] / "bench"))
import bench_java  # noqa: E402

SOURCE = """import java.util.List;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.AppInfoParser;
import org.apache.kafka.common.utils.Utils;
"""


def test_imports_kept_where_kafka_clients_has_them():
    classes = {"org/apache/kafka/common/record/MemoryRecords.class",
               "org/apache/kafka/common/record/TimestampType.class",
               "org/apache/kafka/common/utils/AppInfoParser.class",
               "org/apache/kafka/common/utils/Utils.class",
               "org/apache/kafka/clients/consumer/internals/Utils.class"}
    assert bench_java.resolve_imports(SOURCE, classes) == SOURCE


def test_imports_follow_classes_moved_under_their_package():
    # kafka-clients 4.4's layout: record classes in record.internal, some utilities in
    # utils.internals; TimestampType and Utils stayed (another Utils elsewhere is not taken)
    classes = {"org/apache/kafka/common/record/internal/MemoryRecords.class",
               "org/apache/kafka/common/record/TimestampType.class",
               "org/apache/kafka/common/utils/internals/AppInfoParser.class",
               "org/apache/kafka/common/utils/Utils.class",
               "org/apache/kafka/clients/consumer/internals/Utils.class"}
    assert bench_java.resolve_imports(SOURCE, classes) == SOURCE.replace(
        "record.MemoryRecords", "record.internal.MemoryRecords").replace(
        "utils.AppInfoParser", "utils.internals.AppInfoParser")


def test_imports_left_for_javac_when_missing_or_ambiguous():
    classes = {"org/apache/kafka/common/utils/a/AppInfoParser.class",
               "org/apache/kafka/common/utils/b/AppInfoParser.class"}
    assert bench_java.resolve_imports(SOURCE, classes) == SOURCE


def test_down_conversion_is_compiled_apart():
    """KafkaBench names no class that kafka-clients 4.0 removed (they live in KafkaDownConvert,
    compiled only where they exist), so it compiles against 4.x."""
    removed = ["LazyDownConversionRecords", "ConvertedRecords", "downConvert",
               "RecordConversionStats"]
    code = re.sub(r"//.*", "", bench_java.HARNESS.read_text())     # comments may name them
    assert not [name for name in removed if name in code]
    assert all(name in bench_java.DOWN_CONVERT.read_text() for name in removed[:3])


def test_pooled_runs_take_every_ratio_from_all_passes():
    import report

    def run(ours, java, load):
        return {"benchmarks": [
            {"fullname": "case-a", "stats": {"data": list(ours), "median": 0, "rounds": len(ours)},
             "extra_info": {"ours_cpu_s": list(ours), "kafka_java_s": list(java),
                            "kafka_java_cpu_s": list(java), "kafka_java_jvm_cpu_s": list(java),
                            "loadavg_start": [load, 0, 0], "loadavg_end": [load, 0, 0]}}]}

    data = report.pooled([run([1, 2, 9], [4, 4, 4], 0.5), run([3, 3, 3], [8, 5, 6], 1.5)])
    bench = data["benchmarks"][0]
    assert data["runs"] == 2
    assert bench["extra_info"]["ours_cpu_s"] == [1, 2, 9, 3, 3, 3]
    assert bench["extra_info"]["kafka_java_cpu_s"] == [4, 4, 4, 8, 5, 6]
    assert bench["stats"]["median"] == 3 and bench["stats"]["rounds"] == 3
    assert bench["extra_info"]["loadavg_start"][0] == 0.5
    assert bench["extra_info"]["loadavg_end"][0] == 1.5


def test_the_report_describes_only_the_cases_it_ran():
    # A run of some cases (-k, or Kafka 4.x without down-conversion) is described as run: no
    # "no rounds each", no CRC-walk sentence without those rows, no down-conversion prose.
    import report

    def bench(group, cold, rounds):
        passes = [0.001] * rounds
        return {"group": f"java: {group}", "stats": {"median": 0.001, "rounds": rounds},
                "extra_info": {"kafka_java": {"kafka": "3.9.1"}, "cold_caches": cold,
                               "workload": group, "variant": "v", "items": 1000,
                               "ours_cpu_s": passes, "kafka_java_s": passes,
                               "kafka_java_cpu_s": passes, "kafka_java_jvm_cpu_s": passes}}

    cold = [bench("CRC-checked walk 1KiB none", True, 27)]
    warm = [bench("deep iteration 1KiB none", False, 9)]
    converting = [bench("down-convert lazy 1KiB none to v1", False, 9)]
    def section(benches):
        return report.java_section({"benchmarks": benches}, "python bench/bench_java.py")

    text = section(cold + warm + converting)
    assert "(9 rounds each)" in text and "take 27 rounds each" in text and "downConvert()" in text
    only_cold = section(cold)
    assert "take 27 rounds each" in only_cold and "rounds each)" not in only_cold
    assert "downConvert()" not in only_cold and "LazyDownConvertRecords` uses" not in only_cold
    only_warm = section(warm)
    assert "(9 rounds each)" in only_warm and "evict the caches" not in only_warm


def test_the_report_keeps_the_sections_other_benchmarks_wrote(tmp_path):
    # docs/results.md's network section (serve over TLS, the mirror between Kafka brokers, the
    # event-loop A/B) is run by hand, the Java one by bench_java.py --write-docs: report.py
    # rewriting the file keeps them (the Java one unless its run measured Java itself).
    import report

    results = tmp_path / "results.md"
    network = "<!-- network:begin -->\n## Network layer\n| a | b |\n<!-- network:end -->"
    results.write_text("# Benchmark results\nold table\n<!-- kafka-java:begin -->\nold Java\n"
                       f"<!-- kafka-java:end -->\n{network}\ntrailing prose\n")
    java = "<!-- kafka-java:begin -->\nold Java\n<!-- kafka-java:end -->"
    assert report.kept_sections(results) == f"\n\n{java}\n\n\n{network}\n"
    assert report.kept_sections(results, java=False) == f"\n\n{network}\n"     # the run measured Java
    assert report.kept_sections(tmp_path / "missing.md") == ""
