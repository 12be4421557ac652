package dev.uatu.dispatch;

import dev.uatu.faults.FaultPoints;
import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.Metadata;
import io.grpc.Status;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.spark.sql.Row;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The dispatch of one partition's offset range in one micro-batch (one Spark task).
 *
 * <p>The task thread reads the range and, for each record, waits for the flow-control limiters
 * (the rate limiters, then a permit of the inflight cap) and starts an asynchronous unary call.
 * The call's outcome is routed on a callback thread exactly as uForwarder routes it
 * ({@link Routing}): commit, skip, a produce to a retry tier, the DLQ or the resq (DLQMetadata
 * key, value and headers unchanged, acks=all, retried until acknowledged), or an in-memory
 * retry after a backoff timer. The task returns only when every record of the range is
 * resolved: committed, skipped, or acknowledged by the topic it was produced to. Only then can
 * the micro-batch, and its offsets, commit.
 *
 * <p>Head of line: once the whole range is read and more than 98% of it is resolved, records
 * still outstanding after the grace period are cancelled (their call is aborted, or their retry
 * timer) one at a time, lowest offset first, and produced to the resq (2 tokens) or, without
 * one, to the retry tiers (50 tokens), as far as the partition's token bucket allows (one token
 * per resolved record in the last 5 minutes). A record of the DLQ is never rerouted.
 */
final class PartitionRun {
  private static final Logger LOG = LoggerFactory.getLogger(PartitionRun.class);
  private static final long PARK_NANOS = TimeUnit.MILLISECONDS.toNanos(50);
  private static final Duration POLL = Duration.ofMillis(200);
  private static final Metadata.Key<String> ACTION =
      Metadata.Key.of("kafka-action", Metadata.ASCII_STRING_MARSHALLER);
  private static final Metadata.Key<String> GROUP = ascii("kafka-consumergroup");
  private static final Metadata.Key<String> TOPIC = ascii("kafka-topic");
  private static final Metadata.Key<String> PARTITION = ascii("kafka-partition");
  private static final Metadata.Key<String> OFFSET = ascii("kafka-offset");
  private static final Metadata.Key<String> RETRY_COUNT = ascii("kafka-retrycount");
  private static final Metadata.Key<String> ATTEMPT_COUNT = ascii("kafka-attemptcount");
  private static final Metadata.Key<String> TRACING = ascii("kafka-tracing-info");
  private static final Metadata.Key<byte[]> KEY =
      Metadata.Key.of("kafka-key-bin", Metadata.BINARY_BYTE_MARSHALLER);
  // Record headers become call metadata; names gRPC refuses, or that would shadow the
  // dispatcher's own, are not forwarded.
  private static final Map<String, Object> HEADER_KEYS = new ConcurrentHashMap<>();
  private static final Object NOT_FORWARDED = new Object();

  private final GroupRuntime rt;
  private final DispatchConfig config;
  private final Routing routing;
  private final Range range;
  private final Routing.Kind kind;
  private final GroupRuntime.Flow flow;
  private final DispatchStats stats;
  private final WindowedTokens holTokens;
  private final WindowedTokens dlqTokens;
  private final ConcurrentSkipListMap<Long, Message> outstanding = new ConcurrentSkipListMap<>();
  private final AtomicLong remaining = new AtomicLong();
  private final AtomicLong resolved = new AtomicLong();
  private final AtomicLong rateLimitedNanos = new AtomicLong();
  private final Thread owner = Thread.currentThread();
  private volatile boolean allRead;
  private volatile Throwable failure;
  private long submitted;
  private long firstOffset = -1;
  private long lastOffset = -1;

  PartitionRun(GroupRuntime rt, Range range) {
    this.rt = rt;
    this.config = rt.config;
    this.routing = rt.routing;
    this.range = range;
    this.kind = config.kindOf(range.topic);
    this.flow = rt.flowFor(kind);
    this.stats = new DispatchStats(config.statsWindowMs);
    this.holTokens = rt.holTokens(range.topic, range.partition);
    this.dlqTokens = rt.dlqTokens(range.topic, range.partition);
  }

  List<Row> run(KafkaConsumer<byte[], byte[]> consumer) throws InterruptedException {
    long started = System.nanoTime();
    flow.inflight.takePeak();
    boolean completed = false;
    try {
      readAll(consumer);
      allRead = true;
      awaitResolved();
      checkFailure();
      completed = true;
    } finally {
      if (!completed) {
        abandon();
      }
    }
    long finished = System.nanoTime();
    int peak = flow.inflight.takePeak();
    LOG.info(
        "{}: {} records dispatched in {} ms", range, submitted, (finished - started) / 1_000_000);
    // The fault hook's point "dispatch.after_dispatch" (core/faults.py): every record of the
    // range is resolved, the batch's offsets are not yet checkpointed.
    FaultPoints.hit("dispatch.after_dispatch", range.topic);
    return stats.rows(
        range, firstOffset, lastOffset, peak, flow.inflight.limit(), rateLimitedNanos.get() / 1e6);
  }

  private void readAll(KafkaConsumer<byte[], byte[]> consumer) throws InterruptedException {
    TopicPartition tp = new TopicPartition(range.topic, range.partition);
    consumer.assign(List.of(tp));
    consumer.seek(tp, range.fromOffset);
    long quietSince = System.nanoTime();
    while (consumer.position(tp) < range.untilOffset && failure == null) {
      List<ConsumerRecord<byte[], byte[]>> records = consumer.poll(POLL).records(tp);
      if (records.isEmpty()) {
        if (System.nanoTime() - quietSince > config.sourceTimeoutMs * 1_000_000L) {
          throw new IllegalStateException(
              "no record of " + tp + " came in " + config.sourceTimeoutMs + " ms at offset "
                  + consumer.position(tp) + " (the batch reads up to " + range.untilOffset + ")");
        }
        continue;
      }
      quietSince = System.nanoTime();
      for (ConsumerRecord<byte[], byte[]> record : records) {
        if (record.offset() >= range.untilOffset) {
          break;
        }
        submit(Message.of(record, kind));
      }
    }
  }

  /** The task is ending without its records resolved (interrupted, failed): stop what can be
   * stopped, so no answer routes a record of a batch that will be replayed. Produces already
   * sent cannot be recalled; the replay may write those records again (at-least-once). */
  private void abandon() {
    for (Message m : outstanding.values()) {
      ClientCall<byte[], byte[]> call;
      ScheduledFuture<?> timer;
      synchronized (m) {
        if (m.state != Message.State.WAITING && m.state != Message.State.CALLING) {
          continue;
        }
        m.state = Message.State.CANCELED;
        call = m.call;
        timer = m.timer;
        m.timer = null;
      }
      if (timer != null) {
        timer.cancel(false);
      }
      if (call != null) {
        call.cancel("the dispatch task ended", null);
      }
    }
  }

  // --- the task thread ------------------------------------------------------------------

  private void submit(Message m) throws InterruptedException {
    if (firstOffset < 0) {
      firstOffset = m.physicalOffset;
    }
    lastOffset = m.physicalOffset;
    submitted++;
    outstanding.put(m.physicalOffset, m);
    m.state = Message.State.WAITING;
    remaining.incrementAndGet();
    stats.read(m.valueBytes(), m.undecodable);
    long wait = flow.reserve(m.valueBytes(), System.nanoTime());
    if (wait > 0) {
      rateLimitedNanos.addAndGet(wait);
      sleepNanos(wait);
    }
    flow.inflight.acquire();
    start(m);
  }

  private void awaitResolved() throws InterruptedException {
    long blockedSince = 0;
    while (remaining.get() > 0) {
      checkFailure();
      LockSupport.parkNanos(this, PARK_NANOS);
      if (Thread.interrupted()) {
        throw new InterruptedException("dispatch of " + range + " interrupted");
      }
      blockedSince = headOfLine(blockedSince);
    }
  }

  /** Reroutes one blocking record if uForwarder's rule allows it; returns since when the
   * partition has been blocked (0: not blocked). */
  private long headOfLine(long blockedSince) {
    Routing.HolRule rule = routing.holRule(kind);
    long pending = remaining.get();
    if (rule == null || pending == 0 || submitted == 0) {
      return 0;
    }
    if ((double) resolved.get() / submitted <= config.holMinAcked) {
      return 0;
    }
    long now = System.nanoTime();
    if (blockedSince == 0) {
      return now;
    }
    if (now - blockedSince < config.holGraceMs * 1_000_000L) {
      return blockedSince;
    }
    for (Message m : outstanding.values()) {
      Message.State s = m.state;
      if (s != Message.State.WAITING && s != Message.State.CALLING) {
        continue;
      }
      if (!holTokens.tryAcquire(rule.cost(), now)) {
        return blockedSince; // tokens come back as records resolve
      }
      ClientCall<byte[], byte[]> call;
      ScheduledFuture<?> timer;
      synchronized (m) {
        s = m.state;
        if (s != Message.State.WAITING && s != Message.State.CALLING) {
          holTokens.credit(rule.cost(), now);
          continue;
        }
        m.state = Message.State.CANCELED;
        call = m.call;
        timer = m.timer;
        m.timer = null;
      }
      if (timer != null) {
        timer.cancel(false);
      }
      String destination =
          rule.code() == Routing.Code.RESQ
              ? config.resqTopic
              : routing.destination(Routing.Code.RETRY, m.retryCount);
      if (call != null) {
        call.cancel("head-of-line: rerouted to " + destination, null);
      }
      stats.holRerouted();
      LOG.info("{}: offset {} blocks the batch; rerouted to {}", range, m.physicalOffset, destination);
      produce(m, destination);
      return now; // one at a time; the next after another grace period
    }
    return blockedSince;
  }

  // --- calls ----------------------------------------------------------------------------

  /** Starts one attempt; the caller holds an inflight permit. */
  private void start(Message m) {
    long timeoutMs;
    synchronized (m) {
      if (m.state != Message.State.WAITING) {
        flow.inflight.giveBack();
        return;
      }
      m.state = Message.State.CALLING;
      timeoutMs = config.timeoutMs(m.timeoutCount);
      ClientCall<byte[], byte[]> call =
          rt.channel()
              .newCall(
                  rt.method,
                  CallOptions.DEFAULT.withDeadlineAfter(timeoutMs, TimeUnit.MILLISECONDS));
      m.call = call;
      long startedNanos = System.nanoTime();
      long startedMs = System.currentTimeMillis();
      stats.attempt(startedMs);
      call.start(new Listener(m, startedNanos, startedMs, timeoutMs), metadata(m));
      call.request(1);
      call.sendMessage(m.value == null ? new byte[0] : m.value);
      call.halfClose();
    }
  }

  private final class Listener extends ClientCall.Listener<byte[]> {
    private final Message m;
    private final long startedNanos;
    private final long startedMs;
    private final long timeoutMs;

    Listener(Message m, long startedNanos, long startedMs, long timeoutMs) {
      this.m = m;
      this.startedNanos = startedNanos;
      this.startedMs = startedMs;
      this.timeoutMs = timeoutMs;
    }

    @Override
    public void onClose(Status status, Metadata trailers) {
      try {
        long rtt = System.nanoTime() - startedNanos;
        boolean ours;
        synchronized (m) {
          m.call = null;
          ours = m.state == Message.State.CALLING;
          if (ours) {
            m.state = Message.State.DECIDING;
          }
        }
        if (!ours) { // cancelled by the head-of-line rule, which owns the record now
          flow.inflight.release(-1, false);
          return;
        }
        boolean overdue = rtt > timeoutMs * 1_000_000L;
        String action = trailers == null ? null : trailers.get(ACTION);
        Routing.Code code = routing.responseCode(status.getCode().name(), action, overdue);
        flow.inflight.release(rtt, code == Routing.Code.INVALID || code == Routing.Code.BACKOFF);
        stats.latency(startedMs, rtt);
        if (code == Routing.Code.COMMIT || code == Routing.Code.SKIP) {
          decide(m, code); // never blocks: counts, tokens, resolve
        } else {
          // A produce can block (metadata, a full buffer): not on the transport's thread.
          rt.callbacks.execute(
              () -> {
                try {
                  decide(m, code);
                } catch (RuntimeException | Error e) {
                  fail(e);
                }
              });
        }
      } catch (RuntimeException | Error e) {
        fail(e);
      }
    }
  }

  private void decide(Message m, Routing.Code answer) {
    Routing.Code code = answer;
    if (code == Routing.Code.BACKOFF) {
      stats.timeout();
      long timeouts;
      synchronized (m) {
        timeouts = m.timeoutCount;
        m.timeoutCount++;
      }
      code =
          routing.afterTimeout(kind, timeouts, () -> dlqTokens.tryAcquire(1, System.nanoTime()));
    }
    switch (code) {
      case COMMIT, SKIP -> {
        dlqTokens.credit(1, System.nanoTime());
        resolve(
            m,
            code == Routing.Code.COMMIT
                ? DispatchStats.Outcome.COMMITTED
                : DispatchStats.Outcome.SKIPPED);
      }
      case RETRY, DLQ, RESQ -> {
        long retries;
        synchronized (m) {
          retries = ++m.retryCount;
          m.attempt++;
        }
        String destination = routing.destination(code, retries);
        if (destination.isEmpty()) {
          retryInMemory(m);
        } else {
          produce(m, destination);
        }
      }
      default -> {
        synchronized (m) {
          m.attempt++;
        }
        retryInMemory(m);
      }
    }
  }

  private void retryInMemory(Message m) {
    stats.inMemoryRetry();
    synchronized (m) {
      if (m.state != Message.State.DECIDING) {
        return;
      }
      m.state = Message.State.WAITING;
      long n = ++m.inMemoryRetries;
      m.timer = rt.timers.schedule(() -> redispatch(m), Routing.backoffMs(n), TimeUnit.MILLISECONDS);
    }
  }

  /** A retry's turn: wait for the rate limiters (as a timer, never blocking), then a permit. */
  private void redispatch(Message m) {
    try {
      synchronized (m) {
        m.timer = null;
        if (m.state != Message.State.WAITING) {
          return;
        }
      }
      long wait = flow.reserve(m.valueBytes(), System.nanoTime());
      if (wait > 0) {
        rateLimitedNanos.addAndGet(wait);
        synchronized (m) {
          if (m.state == Message.State.WAITING) {
            m.timer =
                rt.timers.schedule(
                    () -> flow.inflight.acquireAsync(() -> start(m)), wait, TimeUnit.NANOSECONDS);
          }
        }
        return;
      }
      flow.inflight.acquireAsync(() -> start(m));
    } catch (RuntimeException | Error e) {
      fail(e);
    }
  }

  // --- produce to a retry tier, the DLQ or the resq -------------------------------------

  private void produce(Message m, String destination) {
    byte[] key;
    synchronized (m) {
      Message.State s = m.state;
      if (s == Message.State.DONE) {
        return;
      }
      m.state = Message.State.PRODUCING;
      key = m.dlqMetadataKey();
    }
    // Partition by key hash (the key holds the original offset), timestamp from the producer:
    // a tier's delay counts from when the record was written to it. As uForwarder does.
    ProducerRecord<byte[], byte[]> record =
        new ProducerRecord<>(destination, null, null, key, m.value, m.headers);
    try {
      rt.producer.send(record, (meta, error) -> onProduced(m, destination, error));
    } catch (RuntimeException e) {
      onProduced(m, destination, e);
    }
  }

  private void onProduced(Message m, String destination, Exception error) {
    try {
      if (error == null) {
        // The fault hook's point "dispatch.after_tier_produce" (core/faults.py): the write is
        // acknowledged, the record not yet resolved nor its source offset checkpointed.
        FaultPoints.hit("dispatch.after_tier_produce", range.topic);
        resolve(m, outcomeOf(destination));
        return;
      }
      stats.produceRetry();
      long n;
      synchronized (m) {
        n = ++m.produceFailures;
      }
      LOG.warn("{}: offset {} not yet written to {} (attempt {}): {}", range, m.physicalOffset,
          destination, n, error.toString());
      rt.timers.schedule(() -> produce(m, destination), Routing.backoffMs(n), TimeUnit.MILLISECONDS);
    } catch (RuntimeException | Error e) {
      fail(e);
    }
  }

  private DispatchStats.Outcome outcomeOf(String destination) {
    if (destination.equals(config.dlqTopic)) {
      return DispatchStats.Outcome.DLQ;
    }
    if (destination.equals(config.resqTopic)) {
      return DispatchStats.Outcome.RESQ;
    }
    return DispatchStats.Outcome.RETRIED;
  }

  private void resolve(Message m, DispatchStats.Outcome outcome) {
    synchronized (m) {
      if (m.state == Message.State.DONE) {
        return;
      }
      m.state = Message.State.DONE;
    }
    stats.outcome(outcome);
    holTokens.credit(1, System.nanoTime());
    outstanding.remove(m.physicalOffset);
    resolved.incrementAndGet();
    if (remaining.decrementAndGet() == 0 && allRead) {
      LockSupport.unpark(owner);
    }
  }

  // --- helpers --------------------------------------------------------------------------

  private void fail(Throwable e) {
    if (failure == null) {
      failure = e;
    }
    LockSupport.unpark(owner);
  }

  private void checkFailure() {
    Throwable e = failure;
    if (e != null) {
      throw new IllegalStateException("dispatch of " + range + " failed: " + e, e);
    }
  }

  private static void sleepNanos(long nanos) throws InterruptedException {
    long deadline = System.nanoTime() + nanos;
    long left;
    while ((left = deadline - System.nanoTime()) > 0) {
      LockSupport.parkNanos(left);
      if (Thread.interrupted()) {
        throw new InterruptedException("interrupted while rate-limited");
      }
    }
  }

  /** uForwarder's call metadata (GrpcRequest), then the record's own headers. */
  private Metadata metadata(Message m) {
    Metadata md = new Metadata();
    md.put(GROUP, config.consumerGroup);
    md.put(TOPIC, m.logicalTopic);
    md.put(PARTITION, Integer.toString(m.logicalPartition));
    md.put(OFFSET, Long.toString(m.logicalOffset));
    md.put(RETRY_COUNT, Long.toString(m.retryCount));
    md.put(KEY, m.key == null ? new byte[0] : m.key);
    md.put(ATTEMPT_COUNT, Long.toString(m.attempt));
    if (!m.physicalTopic.equals(m.logicalTopic)) {
      md.put(
          TRACING,
          "physical-topic=" + m.physicalTopic + ",physical-partition=" + m.physicalPartition
              + ",physical-offset=" + m.physicalOffset);
    }
    for (Header h : m.headers) {
      forwardHeader(md, h);
    }
    return md;
  }

  @SuppressWarnings("unchecked")
  private static void forwardHeader(Metadata md, Header h) {
    byte[] value = h.value() == null ? new byte[0] : h.value();
    String name = h.key().toLowerCase(java.util.Locale.ROOT);
    boolean binary = name.endsWith(Metadata.BINARY_HEADER_SUFFIX) || !printable(value);
    String keyName = binary && !name.endsWith(Metadata.BINARY_HEADER_SUFFIX)
        ? name + Metadata.BINARY_HEADER_SUFFIX : name;
    Object key = HEADER_KEYS.computeIfAbsent(keyName, PartitionRun::headerKey);
    if (key == NOT_FORWARDED) {
      return;
    }
    if (binary) {
      md.put((Metadata.Key<byte[]>) key, value);
    } else {
      md.put((Metadata.Key<String>) key, new String(value, StandardCharsets.US_ASCII));
    }
  }

  private static Object headerKey(String name) {
    if (name.startsWith("kafka-") || name.startsWith("grpc-") || name.startsWith(":")
        || name.equals("te") || name.equals("content-type") || name.equals("user-agent")) {
      return NOT_FORWARDED;
    }
    try {
      return name.endsWith(Metadata.BINARY_HEADER_SUFFIX)
          ? Metadata.Key.of(name, Metadata.BINARY_BYTE_MARSHALLER)
          : Metadata.Key.of(name, Metadata.ASCII_STRING_MARSHALLER);
    } catch (IllegalArgumentException e) {
      return NOT_FORWARDED;
    }
  }

  private static boolean printable(byte[] value) {
    for (byte b : value) {
      if (b < 0x20 || b > 0x7E) {
        return false;
      }
    }
    return true;
  }

  private static Metadata.Key<String> ascii(String name) {
    return Metadata.Key.of(name, Metadata.ASCII_STRING_MARSHALLER);
  }
}
