package dev.uatu.audit.report;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Drains an {@link AuditTally} every report interval (and at close) into one AuditReport per
 * (topic, window), numbered per reporter instance, and sends them to the audit topic with an
 * idempotent producer; a report not acknowledged is sent again with the same number. The Java
 * twin of Python's {@code core.audit_reports.AuditReporter}.
 */
public final class AuditReporter implements AutoCloseable {
  private final AuditTally tally;
  private final AuditReports.Reporter reporter;
  private final String cluster;
  private final String topic;
  private final KafkaProducer<byte[], byte[]> producer;
  private final ScheduledExecutorService timer;
  private final TreeMap<Long, byte[]> unsent = new TreeMap<>();
  private long sequence;

  /** A reporter for {@code settings}, started (its timer runs every report interval). */
  public AuditReporter(AuditTally tally, AuditSettings settings, String consumerGroup) {
    this(
        tally,
        settings.service(),
        settings.cluster(),
        settings.tier(),
        consumerGroup,
        settings.topic(),
        settings.reporterConfig(),
        settings.reportIntervalMs());
  }

  public AuditReporter(
      AuditTally tally,
      String service,
      String cluster,
      int tier,
      String consumerGroup,
      String topic,
      Map<String, Object> producerConfig,
      long intervalMs) {
    this.tally = tally;
    this.cluster = cluster;
    this.topic = topic;
    this.reporter =
        new AuditReports.Reporter(
            service, hostName(), UUID.randomUUID().toString(), tier, consumerGroup);
    Properties props = new Properties();
    props.putAll(producerConfig);
    props.put(ProducerConfig.ACKS_CONFIG, "all");
    props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    props.put(ProducerConfig.INTERCEPTOR_CLASSES_CONFIG, "");
    props.put(ProducerConfig.CLIENT_ID_CONFIG, "uatu-audit-reporter-" + reporter.instanceId());
    this.producer = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
    this.timer =
        Executors.newSingleThreadScheduledExecutor(
            r -> {
              Thread t = new Thread(r, "uatu-audit-reporter");
              t.setDaemon(true);
              return t;
            });
    timer.scheduleWithFixedDelay(this::flushQuietly, intervalMs, intervalMs, TimeUnit.MILLISECONDS);
  }

  private static String hostName() {
    try {
      return InetAddress.getLocalHost().getHostName();
    } catch (UnknownHostException e) {
      return "unknown";
    }
  }

  public String instanceId() {
    return reporter.instanceId();
  }

  private void flushQuietly() {
    try {
      flush();
    } catch (RuntimeException e) {
      // The reporter must never take the client down; the next flush sends again.
    }
  }

  /** Build reports of everything counted so far and send them (and earlier unsent ones). */
  public synchronized int flush() {
    long now = System.currentTimeMillis();
    for (Map.Entry<AuditTally.Window, AuditTally.Counts> e : tally.drain().entrySet()) {
      sequence++;
      unsent.put(
          sequence,
          AuditReports.encode(
              reporter, cluster, e.getKey(), tally.windowSeconds(), e.getValue(), tally.lgK(),
              sequence, now));
    }
    List<Map.Entry<Long, Future<?>>> sent = new ArrayList<>();
    for (Map.Entry<Long, byte[]> e : unsent.entrySet()) {
      byte[] key = (reporter.instanceId() + "/" + e.getKey()).getBytes(StandardCharsets.UTF_8);
      sent.add(Map.entry(e.getKey(), producer.send(new ProducerRecord<>(topic, key, e.getValue()))));
    }
    producer.flush();
    for (Map.Entry<Long, Future<?>> e : sent) {
      try {
        e.getValue().get();
        unsent.remove(e.getKey());
      } catch (InterruptedException ex) {
        Thread.currentThread().interrupt();
        break;
      } catch (java.util.concurrent.ExecutionException ex) {
        // kept in unsent: sent again next flush, with the same sequence number
      }
    }
    return unsent.size();
  }

  @Override
  public void close() {
    timer.shutdownNow();
    flush();
    producer.close();
  }
}
