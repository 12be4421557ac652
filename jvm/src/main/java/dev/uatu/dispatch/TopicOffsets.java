package dev.uatu.dispatch;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Collections;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * The due-range source's offset: the next offset to dispatch of every partition of one topic,
 * in the JSON shape of Spark's own Kafka source ({@code {"topic":{"0":12,"1":40}}}), so the
 * progress records and the heartbeat reporter (jobs/runtime/reporting.py) read it the same way.
 */
public final class TopicOffsets extends Offset {
  private static final ObjectMapper JSON = new ObjectMapper();
  final String topic;
  final SortedMap<Integer, Long> offsets;

  TopicOffsets(String topic, Map<Integer, Long> offsets) {
    this.topic = topic;
    this.offsets = Collections.unmodifiableSortedMap(new TreeMap<>(offsets));
  }

  @Override
  public String json() {
    StringBuilder sb = new StringBuilder();
    try {
      sb.append("{").append(JSON.writeValueAsString(topic)).append(":{");
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    boolean first = true;
    for (Map.Entry<Integer, Long> e : offsets.entrySet()) {
      if (!first) {
        sb.append(',');
      }
      first = false;
      sb.append('"').append(e.getKey()).append("\":").append(e.getValue());
    }
    return sb.append("}}").toString();
  }

  /** Parses the JSON above; {@code topic} must be its only topic. */
  static TopicOffsets parse(String json, String topic) {
    try {
      JsonNode root = JSON.readTree(json);
      JsonNode partitions = root.path(topic);
      if (partitions.isMissingNode() || root.size() != 1) {
        throw new IllegalArgumentException("offsets " + json + " are not of topic " + topic);
      }
      Map<Integer, Long> offsets = new TreeMap<>();
      partitions
          .properties()
          .forEach(e -> offsets.put(Integer.parseInt(e.getKey()), e.getValue().asLong()));
      return new TopicOffsets(topic, offsets);
    } catch (IOException e) {
      throw new UncheckedIOException("bad offsets JSON " + json, e);
    }
  }
}
