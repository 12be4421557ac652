package dev.uatu.dispatch;

import java.util.function.BooleanSupplier;

/**
 * uForwarder's routing of an RPC outcome (uforwarder-api.md §2.6), the Java twin of
 * {@code jobs/dispatch/routing.py}. The status and trailer tables come from Python (one source
 * of truth); the rules here are checked against the Python ones over every input by
 * {@code tests/jobs/dispatch/test_dispatch_jvm.py}.
 */
public final class Routing {
  /** uForwarder's DispatcherResponse.Code, as far as the dispatcher sees them. */
  public enum Code {
    COMMIT,
    SKIP,
    RETRY,
    DLQ,
    RESQ,
    BACKOFF,
    INVALID
  }

  /** What a physical topic is to the JobGroup. */
  public enum Kind {
    MAIN,
    TIER,
    RESQ,
    DLQ
  }

  /** A head-of-line reroute: where to, and its token cost. */
  public record HolRule(Code code, int cost) {}

  private final DispatchConfig config;

  public Routing(DispatchConfig config) {
    this.config = config;
  }

  /** The code of one finished call (DispatcherImpl.dispatcherResponseFromGrpcStatus). The
   * {@code kafka-action} trailer is read only on an error status, as uForwarder does; an
   * unknown trailer value is INVALID; UNAVAILABLE counts as a timeout only past the deadline. */
  public Code responseCode(String status, String trailer, boolean overdue) {
    if ("OK".equals(status)) {
      return Code.COMMIT;
    }
    if (trailer != null && !trailer.isEmpty()) {
      return Code.valueOf(config.trailerCodes.getOrDefault(trailer, "INVALID"));
    }
    if ("UNAVAILABLE".equals(status)) {
      return overdue ? Code.BACKOFF : Code.INVALID;
    }
    return Code.valueOf(config.statusCodes.getOrDefault(status, "INVALID"));
  }

  /** A timeout (BACKOFF) becomes (ProcessorImpl.handleTimeout): DLQ for a DLQ record; an
   * in-memory retry for a resq record; DLQ when max_rpc_timeouts is set, the message already
   * timed out that often and the partition's DLQ token bucket allows it; else RETRY. The
   * caller then increments the message's timeout count. */
  public Code afterTimeout(Kind kind, long timeoutCount, BooleanSupplier dlqToken) {
    if (kind == Kind.DLQ) {
      return Code.DLQ;
    }
    if (kind == Kind.RESQ) {
      return Code.INVALID;
    }
    if (config.maxRpcTimeouts > 0
        && timeoutCount >= config.maxRpcTimeouts
        && dlqToken.getAsBoolean()) {
      return Code.DLQ;
    }
    return Code.RETRY;
  }

  /** The topic a RETRY, DLQ or RESQ goes to, "" for an in-memory retry (the Kafka fallback of
   * ProcessorImpl and RetryUtils.getKafkaDestinationRetryTopic). {@code retryCount} is the
   * count after this failure's increment. */
  public String destination(Code code, long retryCount) {
    switch (code) {
      case DLQ:
        if (!config.dlqTopic.isEmpty()) {
          return config.dlqTopic;
        }
        return retryTopic(retryCount);
      case RETRY:
        return retryTopic(retryCount);
      case RESQ:
        return config.resqTopic;
      default:
        return "";
    }
  }

  /** The first tier (sorted by delay) whose cumulative max_retry_count covers the count; past
   * the last, the DLQ, or the last tier when there is no DLQ; with no tiers, the DLQ. */
  public String retryTopic(long retryCount) {
    if (config.tiers.isEmpty()) {
      return config.dlqTopic;
    }
    long ceiling = 0;
    for (DispatchConfig.Tier tier : config.tiers) {
      ceiling += tier.maxRetryCount;
      if (retryCount <= ceiling) {
        return tier.topic;
      }
    }
    if (config.dlqTopic.isEmpty()) {
      return config.tiers.get(config.tiers.size() - 1).topic;
    }
    return config.dlqTopic;
  }

  /** BlockingQueueStubManager's rules: resq first (2 tokens) unless this is the resq topic;
   * then a retry tier (50 tokens) unless this is a tier or the resq; never on the DLQ. */
  public HolRule holRule(Kind kind) {
    if (kind == Kind.DLQ) {
      return null;
    }
    if (kind != Kind.RESQ && !config.resqTopic.isEmpty()) {
      return new HolRule(Code.RESQ, 2);
    }
    if (kind == Kind.MAIN && !config.tiers.isEmpty()) {
      return new HolRule(Code.RETRY, 50);
    }
    return null;
  }

  /** In-memory retry backoff (Failsafe withBackoff(1 ms, 60 s), factor 2) before attempt n+1. */
  public static long backoffMs(long retries) {
    if (retries <= 1) {
      return 1;
    }
    return retries > 17 ? 60_000 : Math.min(60_000, 1L << (retries - 1));
  }
}
