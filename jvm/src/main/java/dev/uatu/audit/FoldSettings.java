package dev.uatu.audit;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.util.SerializableConfiguration;

/**
 * What every fold task of one audit job needs, shipped with the tasks: the audit configs grouped
 * by window length (configs of one length share their windows, counts and sketches), the HLL
 * precision, how a record's fields are computed, and where the exact audits keep their keys.
 */
public final class FoldSettings implements Serializable {
  private static final long serialVersionUID = 1L;

  static final String EXACT = "AUDIT_TYPE_EXACT_UNIQ";

  /** One window length and the audit types that use it. */
  static final class Interval implements Serializable {
    private static final long serialVersionUID = 1L;

    final int seconds;
    final long ms;
    final long latenessMs;
    /** How far behind the partition's watermark a window's end may be before its exact keys
     * are dropped: the key retention, never less than the lateness. */
    final long retentionMs;
    final String[] auditTypes;
    final boolean exact;

    Interval(int seconds, long latenessMs, long retentionMs, List<String> auditTypes) {
      this.seconds = seconds;
      this.ms = seconds * 1000L;
      this.latenessMs = latenessMs;
      this.retentionMs = Math.max(retentionMs, latenessMs);
      this.auditTypes = auditTypes.toArray(new String[0]);
      this.exact = auditTypes.contains(EXACT);
    }
  }

  final Interval[] intervals;
  final int hllLgConfigK;
  final RecordFields fields;
  final String keysDir; // null: no exact audit
  final boolean keysPerTopic; // a job that audits many topics: keysDir/topics/<topic>/p<n>
  final SerializableConfiguration hadoopConf;

  private FoldSettings(
      Interval[] intervals,
      int hllLgConfigK,
      RecordFields fields,
      String keysDir,
      boolean keysPerTopic,
      Configuration hadoopConf) {
    this.intervals = intervals;
    this.hllLgConfigK = hllLgConfigK;
    this.fields = fields;
    this.keysDir = keysDir;
    this.keysPerTopic = keysPerTopic;
    this.hadoopConf = new SerializableConfiguration(hadoopConf);
  }

  /**
   * Where the exact keys of {@code topic}'s partitions live ({@link PartitionKeys} adds
   * {@code p<n>}): {@code keysDir} itself for a job of one topic (the layout its checkpoints
   * have always had), {@code keysDir/topics/<topic>} for a job of many, so each (topic,
   * partition) has keys of its own. A Kafka topic name is a safe path segment.
   */
  String keysDirOf(String topic) {
    return keysPerTopic ? keysDir + "/topics/" + topic : keysDir;
  }

  /**
   * {@code auditTypes[i]} audits windows of {@code intervalSeconds[i]}; a record is late once
   * the audit time passes its window's end plus {@code latenessSeconds} (negative: the window's
   * own length). {@code keysDir} is where exact audits keep their keys (under the checkpoint),
   * each window's until its end is {@code keyRetentionSeconds} (at least its lateness) behind
   * the partition's watermark, per topic when {@code keysPerTopic} ({@link #keysDirOf}).
   */
  static FoldSettings of(
      List<String> auditTypes,
      List<Integer> intervalSeconds,
      long latenessSeconds,
      int hllLgConfigK,
      RecordFields fields,
      String keysDir,
      long keyRetentionSeconds,
      boolean keysPerTopic,
      Configuration hadoopConf) {
    Map<Integer, List<String>> byInterval = new TreeMap<>();
    for (int i = 0; i < auditTypes.size(); i++) {
      byInterval.computeIfAbsent(intervalSeconds.get(i), k -> new ArrayList<>()).add(auditTypes.get(i));
    }
    List<Interval> intervals = new ArrayList<>();
    boolean exact = false;
    for (Map.Entry<Integer, List<String>> e : byInterval.entrySet()) {
      long lateness = (latenessSeconds < 0 ? e.getKey() : latenessSeconds) * 1000L;
      Interval interval =
          new Interval(e.getKey(), lateness, keyRetentionSeconds * 1000L, e.getValue());
      exact |= interval.exact;
      intervals.add(interval);
    }
    return new FoldSettings(
        intervals.toArray(new Interval[0]),
        hllLgConfigK,
        fields,
        exact ? keysDir : null,
        keysPerTopic,
        hadoopConf);
  }
}
