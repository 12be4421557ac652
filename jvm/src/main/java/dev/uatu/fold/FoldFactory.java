package dev.uatu.fold;

import java.io.Serializable;

/**
 * Makes the {@link RecordFold} of one range, in the task that reads it. Shipped to the
 * executors with the task, so it carries whatever the folds need (settings, earlier state).
 */
@FunctionalInterface
public interface FoldFactory extends Serializable {
  RecordFold create(FoldRange range);
}
