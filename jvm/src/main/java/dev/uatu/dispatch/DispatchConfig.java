package dev.uatu.dispatch;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Everything a dispatch task needs, built on the driver from the JSON that
 * {@code jobs/dispatch/job.py} writes from the validated spec (the names are the spec's). It is
 * serialised into every task, and {@link #fingerprint} keys the per-JVM clients and limiters.
 */
public final class DispatchConfig implements Serializable {
  private static final long serialVersionUID = 1L;

  /** One retry tier, in the order the spec sorted them (by processing delay). */
  public static final class Tier implements Serializable {
    private static final long serialVersionUID = 1L;
    public final String topic;
    public final long delayMs;
    public final long maxRetryCount;

    Tier(String topic, long delayMs, long maxRetryCount) {
      this.topic = topic;
      this.delayMs = delayMs;
      this.maxRetryCount = maxRetryCount;
    }
  }

  public final String fingerprint;
  public final String jobGroupId;
  public final String cluster;
  public final String consumerGroup;
  public final String mainTopic;
  public final String procedure;
  public final String target;
  public final long rpcTimeoutMs;
  public final long rpcTimeoutLimitMs;
  public final long maxRpcTimeouts;
  public final String dlqTopic;
  public final List<Tier> tiers;
  public final String resqTopic; // empty: no resilience queue
  public final double messagesPerSec; // 0: unlimited (this JVM's share)
  public final double bytesPerSec;
  public final int maxInflight; // <= 0: adaptive
  public final boolean resqOwnFlow;
  public final double resqMessagesPerSec;
  public final double resqBytesPerSec;
  public final int resqMaxInflight;
  public final int adaptiveMaxInflight;
  public final long holGraceMs;
  public final double holMinAcked;
  public final long statsWindowMs;
  public final int channels;
  public final int callbackThreads;
  public final long sourceTimeoutMs;
  public final Map<String, String> consumerConfig;
  public final Map<String, String> producerConfig;
  public final Map<String, String> statusCodes;
  public final Map<String, String> trailerCodes;

  private DispatchConfig(String json, JsonNode n) {
    this.fingerprint = json;
    this.jobGroupId = n.path("job_group_id").asText();
    this.cluster = n.path("cluster").asText();
    this.consumerGroup = n.path("consumer_group").asText();
    this.mainTopic = n.path("main_topic").asText();
    this.procedure = n.path("procedure").asText();
    this.target = n.path("target").asText();
    this.rpcTimeoutMs = n.path("rpc_timeout_ms").asLong();
    this.rpcTimeoutLimitMs = n.path("rpc_timeout_limit_ms").asLong();
    this.maxRpcTimeouts = n.path("max_rpc_timeouts").asLong();
    this.dlqTopic = n.path("dlq_topic").asText("");
    List<Tier> tierList = new ArrayList<>();
    for (JsonNode t : n.path("tiers")) {
      tierList.add(
          new Tier(
              t.path("topic").asText(), t.path("delay_ms").asLong(), t.path("max_retry_count").asLong()));
    }
    this.tiers = Collections.unmodifiableList(tierList);
    this.resqTopic = n.path("resq_topic").asText("");
    this.messagesPerSec = n.path("messages_per_sec").asDouble();
    this.bytesPerSec = n.path("bytes_per_sec").asDouble();
    this.maxInflight = n.path("max_inflight").asInt();
    this.resqOwnFlow = n.path("resq_own_flow").asBoolean();
    this.resqMessagesPerSec = n.path("resq_messages_per_sec").asDouble();
    this.resqBytesPerSec = n.path("resq_bytes_per_sec").asDouble();
    this.resqMaxInflight = n.path("resq_max_inflight").asInt();
    this.adaptiveMaxInflight = n.path("adaptive_max_inflight").asInt(1000);
    this.holGraceMs = n.path("hol_grace_ms").asLong();
    this.holMinAcked = n.path("hol_min_acked").asDouble(0.98);
    this.statsWindowMs = Math.max(1, n.path("stats_window_ms").asLong(60_000));
    this.channels = Math.max(1, n.path("channels").asInt(2));
    this.callbackThreads = Math.max(1, n.path("callback_threads").asInt(2));
    this.sourceTimeoutMs = n.path("source_timeout_ms").asLong(120_000);
    this.consumerConfig = stringMap(n.path("consumer_config"));
    this.producerConfig = stringMap(n.path("producer_config"));
    this.statusCodes = stringMap(n.path("status_codes"));
    this.trailerCodes = stringMap(n.path("trailer_codes"));
  }

  public static DispatchConfig fromJson(String json) {
    try {
      return new DispatchConfig(json, new ObjectMapper().readTree(json));
    } catch (IOException e) {
      throw new UncheckedIOException("bad dispatch config JSON", e);
    }
  }

  /** What a physical topic is to this JobGroup. */
  public Routing.Kind kindOf(String topic) {
    if (!dlqTopic.isEmpty() && topic.equals(dlqTopic)) {
      return Routing.Kind.DLQ;
    }
    if (!resqTopic.isEmpty() && topic.equals(resqTopic)) {
      return Routing.Kind.RESQ;
    }
    for (Tier t : tiers) {
      if (t.topic.equals(topic)) {
        return Routing.Kind.TIER;
      }
    }
    return Routing.Kind.MAIN;
  }

  /** The deadline of a call after {@code timeoutCount} timeouts: rpc_timeout_ms doubled per
   * timeout, capped by rpc_timeout_limit_ms (uForwarder's GrpcUtils.getTimeout). */
  public long timeoutMs(long timeoutCount) {
    long timeout = Math.max(1, Math.min(rpcTimeoutMs, rpcTimeoutLimitMs));
    for (long i = 0; i < timeoutCount && timeout < rpcTimeoutLimitMs; i++) {
      timeout = Math.min(rpcTimeoutLimitMs, timeout << 1);
    }
    return timeout;
  }

  private static Map<String, String> stringMap(JsonNode node) {
    Map<String, String> map = new HashMap<>();
    node.properties().forEach(e -> map.put(e.getKey(), e.getValue().asText()));
    return Collections.unmodifiableMap(map);
  }
}
