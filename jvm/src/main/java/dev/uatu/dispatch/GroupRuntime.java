package dev.uatu.dispatch;

import io.grpc.ManagedChannel;
import io.grpc.MethodDescriptor;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * What the tasks of one JobGroup share in one executor JVM, for as long as the JVM lives
 * (uForwarder's pipeline on a worker): the gRPC channels to the service, the Kafka producer for
 * the retry, DLQ and resq topics, the flow-control limiters, the token buckets of the
 * head-of-line and timeout rules, and the threads that run callbacks and timers.
 *
 * <p>Flow control: uForwarder enforces on each worker the sum of the FlowControl shares of the
 * partition jobs assigned to it. Here all of a JobGroup's partitions are dispatched by the
 * tasks of its executors, so each JVM gets the group's quota times its share (1 in local mode;
 * 1/executors on a cluster, see spec.py), and every task of the group draws from it. Records of
 * the resq topic use resq_config.flow_control when it is set.
 */
public final class GroupRuntime {
  private static final Map<String, GroupRuntime> RUNTIMES = new ConcurrentHashMap<>();
  private static final double BURST_SECONDS = 0.2;
  /** Where the warm-up's throwaway clients point: a privileged port nothing here listens on. */
  static final String REFUSING_ADDRESS = "127.0.0.1:1";

  final DispatchConfig config;
  final Routing routing;
  final MethodDescriptor<byte[], byte[]> method;
  final ManagedChannel[] channels;
  final ExecutorService callbacks;
  final ScheduledThreadPoolExecutor timers;
  final KafkaProducer<byte[], byte[]> producer;
  final Flow main;
  final Flow resq;
  private final AtomicInteger nextChannel = new AtomicInteger();
  private final Map<String, WindowedTokens> holTokens = new ConcurrentHashMap<>();
  private final Map<String, WindowedTokens> dlqTokens = new ConcurrentHashMap<>();

  /** One quota: its inflight cap and its rate limiters (null when unlimited). */
  static final class Flow {
    final Inflight inflight;
    final RateLimiter messages;
    final RateLimiter bytes;

    Flow(Inflight inflight, RateLimiter messages, RateLimiter bytes) {
      this.inflight = inflight;
      this.messages = messages;
      this.bytes = bytes;
    }

    /** Nanoseconds to wait before sending a record of {@code valueBytes}. */
    long reserve(int valueBytes, long now) {
      long wait = 0;
      if (messages != null) {
        wait = Math.max(wait, messages.reserve(1, now));
      }
      if (bytes != null && valueBytes > 0) {
        wait = Math.max(wait, bytes.reserve(valueBytes, now));
      }
      return wait;
    }
  }

  private GroupRuntime(DispatchConfig config) {
    this.config = config;
    this.routing = new Routing(config);
    this.method =
        MethodDescriptor.<byte[], byte[]>newBuilder()
            .setType(MethodDescriptor.MethodType.UNARY)
            .setFullMethodName(config.procedure)
            .setRequestMarshaller(BYTES)
            .setResponseMarshaller(BYTES)
            .build();
    this.callbacks =
        Executors.newFixedThreadPool(config.callbackThreads, daemon("uatu-dispatch-callback"));
    this.timers = new ScheduledThreadPoolExecutor(1, daemon("uatu-dispatch-timer"));
    timers.setRemoveOnCancelPolicy(true);
    this.channels = new ManagedChannel[config.channels];
    for (int i = 0; i < channels.length; i++) {
      channels[i] = channel(config.target);
    }
    this.producer = producer(config.producerConfig);
    long now = System.nanoTime();
    this.main = flow(config.messagesPerSec, config.bytesPerSec, config.maxInflight, now);
    this.resq =
        config.resqOwnFlow
            ? flow(config.resqMessagesPerSec, config.resqBytesPerSec, config.resqMaxInflight, now)
            : main;
  }

  private Flow flow(double messagesPerSec, double bytesPerSec, int maxInflight, long now) {
    Inflight inflight =
        maxInflight > 0
            ? Inflight.fixed(maxInflight, callbacks)
            : Inflight.adaptive(config.adaptiveMaxInflight, callbacks);
    return new Flow(
        inflight,
        messagesPerSec > 0 ? new RateLimiter(messagesPerSec, BURST_SECONDS, now) : null,
        bytesPerSec > 0 ? new RateLimiter(bytesPerSec, BURST_SECONDS, now) : null);
  }

  /** The runtime of {@code config}'s JobGroup in this JVM, built on first use. */
  public static GroupRuntime of(DispatchConfig config) {
    GroupRuntime runtime = RUNTIMES.get(config.fingerprint);
    if (runtime != null) {
      return runtime;
    }
    synchronized (RUNTIMES) {
      return RUNTIMES.computeIfAbsent(config.fingerprint, k -> new GroupRuntime(config));
    }
  }

  /**
   * Loads and initialises what a runtime's first build would (gRPC's Netty transport, its DNS
   * resolver, Kafka's producer) by building a throwaway channel and producer and closing them:
   * the first build pays for cold classes, and a worker application that takes several
   * dispatch groups at once would otherwise pay it on their start, CPU they share with every
   * other group starting. Both point at {@link #REFUSING_ADDRESS}: the channel tries it once
   * (waiting at most {@code timeoutMs} for the refusal), and the producer, client id {@code
   * uatu-warm-up}, is closed at once (its one attempt is refused too). Both are built as a
   * runtime builds its own ({@link #channel}, {@link #producer}).
   */
  static void warmUp(long timeoutMs) throws InterruptedException {
    ManagedChannel channel = channel("dns:///" + REFUSING_ADDRESS);
    try {
      long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
      io.grpc.ConnectivityState state = channel.getState(true);
      while ((state == io.grpc.ConnectivityState.IDLE
              || state == io.grpc.ConnectivityState.CONNECTING)
          && System.nanoTime() < deadline) {
        Thread.sleep(10);
        state = channel.getState(false);
      }
    } finally {
      channel.shutdownNow();
    }
    // Its one connection attempt is logged (refused) under this name.
    producer(Map.of("bootstrap.servers", REFUSING_ADDRESS, "client.id", "uatu-warm-up"))
        .close(java.time.Duration.ZERO);
  }

  /** A channel to {@code target} as every runtime builds it (the warm-up's too). */
  private static ManagedChannel channel(String target) {
    return NettyChannelBuilder.forTarget(target)
        .usePlaintext()
        .disableRetry()
        // Answers are handled on the transport's threads: a hand-off per callback (three per
        // call) cost more than the work. Anything that may block (a produce to a retry, DLQ or
        // resq topic) is handed to `callbacks` by PartitionRun.
        .directExecutor()
        .maxInboundMessageSize(64 << 20)
        .build();
  }

  private static KafkaProducer<byte[], byte[]> producer(Map<String, String> config) {
    Properties props = new Properties();
    props.putAll(config);
    return new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
  }

  /**
   * Connects every channel (they connect lazily otherwise, and the first calls, which would
   * pay for the connection, could miss a short deadline and be routed as timeouts). Waits at
   * most {@code timeoutMs}; a service that is not up yet is not an error here.
   */
  boolean connect(long timeoutMs) throws InterruptedException {
    long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
    while (true) {
      boolean ready = true;
      for (ManagedChannel channel : channels) {
        ready &= channel.getState(true) == io.grpc.ConnectivityState.READY;
      }
      if (ready || System.nanoTime() > deadline) {
        return ready;
      }
      Thread.sleep(20);
    }
  }

  ManagedChannel channel() {
    return channels[Math.floorMod(nextChannel.getAndIncrement(), channels.length)];
  }

  Flow flowFor(Routing.Kind kind) {
    return kind == Routing.Kind.RESQ ? resq : main;
  }

  /** Head-of-line tokens of one physical partition: one per resolved message, 5-minute window. */
  WindowedTokens holTokens(String topic, int partition) {
    return holTokens.computeIfAbsent(
        topic + "-" + partition, k -> new WindowedTokens(TimeUnit.MINUTES.toMillis(5), 0));
  }

  /** DLQ tokens for timeouts: one per committed or skipped message, one free per window. */
  WindowedTokens dlqTokens(String topic, int partition) {
    return dlqTokens.computeIfAbsent(
        topic + "-" + partition, k -> new WindowedTokens(TimeUnit.MINUTES.toMillis(5), 1));
  }

  void close() {
    for (ManagedChannel channel : channels) {
      channel.shutdownNow();
    }
    producer.close(java.time.Duration.ofSeconds(10));
    timers.shutdownNow();
    callbacks.shutdownNow();
  }

  /**
   * Closes the runtimes of one JobGroup in this JVM (its run ended). Never another group's: a
   * worker application runs many dispatch groups in one JVM, and a closed runtime fails every
   * call its group makes next.
   */
  static void closeGroup(String jobGroupId) {
    synchronized (RUNTIMES) {
      RUNTIMES
          .values()
          .removeIf(
              runtime -> {
                if (!runtime.config.jobGroupId.equals(jobGroupId)) {
                  return false;
                }
                runtime.close();
                return true;
              });
    }
  }

  /** The JobGroups with a runtime open in this JVM, sorted. */
  static List<String> openGroups() {
    return RUNTIMES.values().stream().map(r -> r.config.jobGroupId).distinct().sorted().toList();
  }

  private static java.util.concurrent.ThreadFactory daemon(String name) {
    AtomicInteger n = new AtomicInteger();
    return r -> {
      Thread t = new Thread(r, name + "-" + n.incrementAndGet());
      t.setDaemon(true);
      return t;
    };
  }

  static final MethodDescriptor.Marshaller<byte[]> BYTES =
      new MethodDescriptor.Marshaller<>() {
        @Override
        public InputStream stream(byte[] value) {
          return new ByteArrayInputStream(value);
        }

        @Override
        public byte[] parse(InputStream stream) {
          try {
            return stream.readAllBytes();
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        }
      };
}
