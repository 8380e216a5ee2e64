package org.apache.spark.sql.cogra

import scala.reflect.ClassTag

import org.apache.spark.{Partition, TaskContext}
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, PythonUDF, SortOrder, UnsafeRow}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, MapInArrow}
import org.apache.spark.sql.catalyst.plans.physical.Partitioning
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}
import org.apache.spark.sql.execution.python.MapInArrowExec
import org.apache.spark.sql.internal.{ReadOnlySQLConf, SQLConf}

/**
 * The record batches a batch MATCH_TREND streams to its Python workers: closed by row count
 * alone.
 *
 * Spark's Arrow runners close a batch at `spark.sql.execution.arrow.maxRecordsPerBatch`
 * rows or at `maxBytesPerBatch` bytes (64 MiB by default). The byte limit is checked after
 * every row by asking each Arrow vector for its buffer size (`ArrowWriter.sizeInBytes`),
 * which for the one struct column MapInArrow sends walks every field: about a tenth of a
 * warm q1 over 2M rows, and more of a new application's first (that code runs interpreted
 * until the JIT compiles it). Spark skips the check when the limit is `Int.MaxValue`, which
 * is what MATCH_TREND's runners get here ([[ArrowBatchesExec]]). Its rows are events of the
 * few columns the query reads, so row count bounds a batch; what could still pass Arrow's
 * 2 GiB per vector -- rows of ~100 KB and more -- fails the task with an error naming the
 * settings ([[RowSizeCheckExec]]). A session that sets `maxBytesPerBatch` itself keeps
 * Spark's own plan and check.
 *
 * Why not set the limit for the session: every other Arrow UDF of the session reads it.
 */
private[cogra] object ArrowBatches {
  val MaxBytesKey = "spark.sql.execution.arrow.maxBytesPerBatch"
  /** A batch of rows must stay well under Arrow's 2 GiB per vector. */
  val BatchBytesLimit: Long = 1L << 30

  /** Plans a batch MATCH_TREND's MapInArrow (see [[ArrowBatches]]); Spark plans the rest. */
  object Planning extends SparkStrategy {
    override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
      case MapInArrow(udf: PythonUDF, output, child, false, profile)
          if udf.name == MatchTrend.DisplayName && closedByRows(SQLConf.get) =>
        val rowsPerBatch = SQLConf.get.arrowMaxRecordsPerBatch
        ArrowBatchesExec(
          MapInArrowExec(udf, output, RowSizeCheckExec(planLater(child), rowsPerBatch), false, profile)) :: Nil
      case _ => Nil
    }
  }

  /** Whether batches may be closed by row count: the session neither sets a byte limit nor
   * lifts the row limit (a non-positive `maxRecordsPerBatch` means one batch per partition). */
  def closedByRows(conf: SQLConf): Boolean =
    !conf.contains(MaxBytesKey) && conf.arrowMaxRecordsPerBatch > 0
}

/**
 * Runs `child` (MATCH_TREND's MapInArrowExec) with `maxBytesPerBatch = Int.MaxValue` in each
 * task: Spark's Arrow runner reads the setting from the task's SQL settings when a task
 * creates it, which happens as the task computes the child's partition.
 */
private[cogra] case class ArrowBatchesExec(child: SparkPlan) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = child.outputPartitioning
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering

  override protected def doExecute(): RDD[InternalRow] = new RowBatchedRDD(child.execute())

  override protected def withNewChildInternal(newChild: SparkPlan): ArrowBatchesExec =
    copy(child = newChild)
}

/** `prev`'s partitions, each computed under the task's SQL settings but for
 * `maxBytesPerBatch = Int.MaxValue` ([[RowBatchedConf]]). */
private[cogra] class RowBatchedRDD[T: ClassTag](prev: RDD[T]) extends RDD[T](prev) {
  override protected def getPartitions: Array[Partition] = firstParent[T].partitions

  override def compute(split: Partition, context: TaskContext): Iterator[T] =
    SQLConf.withExistingConf(new RowBatchedConf(context))(firstParent[T].iterator(split, context))
}

/** A task's SQL settings (read, as Spark's own, from the task's properties) with no byte
 * limit on Arrow batches. */
private[cogra] class RowBatchedConf(context: TaskContext) extends ReadOnlySQLConf(context) {
  override def arrowMaxBytesPerBatch: Long = Int.MaxValue
}

/**
 * Passes the rows MATCH_TREND's Python workers will read, failing on one of more than
 * 1 GiB / `rowsPerBatch` bytes: a batch of such rows could pass Arrow's vector limit now
 * that batches are closed by row count ([[ArrowBatches]]). The size of a row from Spark's
 * sort is known without reading it.
 */
private[cogra] case class RowSizeCheckExec(child: SparkPlan, rowsPerBatch: Int) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = child.outputPartitioning
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering

  override protected def doExecute(): RDD[InternalRow] = {
    val rowsPerBatch = this.rowsPerBatch
    val limit = ArrowBatches.BatchBytesLimit / rowsPerBatch
    child.execute().mapPartitionsInternal { rows =>
      rows.map {
        case row: UnsafeRow if row.getSizeInBytes > limit =>
          throw new CograRowSizeException(
            s"${MatchTrend.DisplayName}: a row of ${row.getSizeInBytes} bytes in the columns the " +
              s"query reads; Arrow batches of $rowsPerBatch such rows could pass Arrow's 2 GiB " +
              s"limit. Set ${ArrowBatches.MaxBytesKey} (e.g. 64MB) to close batches by size, or " +
              "lower spark.sql.execution.arrow.maxRecordsPerBatch.")
        case row => row
      }
    }
  }

  override protected def withNewChildInternal(newChild: SparkPlan): RowSizeCheckExec =
    copy(child = newChild)
}

/** A row too large for MATCH_TREND's Arrow batches (see [[RowSizeCheckExec]]). */
class CograRowSizeException(message: String) extends IllegalStateException(message)
