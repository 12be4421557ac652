/**
 * Folds of Spark-planned Kafka offset ranges in JVM tasks, for any job that reduces a topic's
 * records to a few rows per micro-batch (LOAD_GEN_CONSUME today; the audit job is the next
 * user).
 *
 * <p>The contract, in the order a job uses it:
 *
 * <ul>
 *   <li>{@link dev.uatu.fold.RangeFolds#planned}: the offset ranges Spark's Kafka source planned
 *       for a micro-batch, read from the batch's plan without reading its rows.
 *   <li>{@link dev.uatu.fold.RangeFolds#fold}: the ranges packed into about one Spark task per
 *       slot ({@link dev.uatu.fold.RangeFolds#packed}); each task reads its ranges with one
 *       pooled byte-array consumer ({@link dev.uatu.fold.Consumers}, {@link
 *       dev.uatu.fold.RangeReader}) and hands every record, in offset order, to the {@link
 *       dev.uatu.fold.RecordFold} its {@link dev.uatu.fold.FoldFactory} made for the range;
 *       the folds' rows come back to the driver as the folds made them ({@link
 *       dev.uatu.fold.TaskRows}).
 *   <li>{@link dev.uatu.fold.BatchState}: a job's own state per micro-batch next to the
 *       checkpoint, written before the batch's output, so a replayed batch starts from the same
 *       state.
 *   <li>{@link dev.uatu.fold.MicroClock}: the epoch-microsecond clock fetch times are read from.
 * </ul>
 *
 * <p>Self-contained: nothing here imports another {@code dev.uatu} package (a test in
 * tests/jobs/loadgen/test_loadgen_units.py checks it), and nothing here knows a job's record
 * format; job-specific folds live with their job ({@code dev.uatu.loadgen.SequenceFold}).
 */
package dev.uatu.fold;
