package org.apache.spark.sql.cogra

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, PythonUDF}
import org.apache.spark.sql.catalyst.plans.physical.Partitioning
import org.apache.spark.sql.execution.{SQLExecution, SparkPlan, UnaryExecNode}
import org.apache.spark.sql.execution.metric.{SQLMetric, SQLMetrics}
import org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkExec
import org.apache.spark.sql.execution.streaming.operators.stateful.EventTimeWatermarkExec

/**
 * Late rows of a streaming MATCH_TREND, dropped right above the watermark (MATCH_TREND's,
 * or the input's own: a stream has one), before the pushed filter, so every late input row
 * counts; and counted in the stateful operator's own `numRowsDroppedByWatermark`, which the
 * query's progress reports.
 *
 * Late means at or below the watermark of the micro-batch that reads the row -- the largest
 * time seen in earlier batches minus the delay -- which is the watermark the operator closes
 * windows by in that batch. Spark's operator itself drops only rows at or below the previous
 * micro-batch's watermark, and sees packed groups, not rows, under the packed operator: left
 * to it, which rows count would depend on the operator and on how the input was cut into
 * micro-batches.
 */
private[cogra] object LateRows {
  val Metric = "numRowsDroppedByWatermark"

  def insert(plan: SparkPlan): SparkPlan = plan.transformUp {
    case op: TransformWithStateInPySparkExec
        if ours(op) && op.eventTimeWatermarkForEviction.isDefined && op.stateInfo.isDefined =>
      val watermarkMs = op.eventTimeWatermarkForEviction.get
      val operatorId = op.stateInfo.get.operatorId
      // (The operator's second child is its initial state's plan, empty here.)
      op.withNewChildren(op.children.updated(0, op.child.transformUp {
        case w: EventTimeWatermarkExec => LateRowsExec(w, w.eventTime, watermarkMs, operatorId)
        case l: LateRowsExec => l.copy(watermarkMs = watermarkMs)
      }))
  }

  private def ours(op: TransformWithStateInPySparkExec): Boolean = op.functionExpr match {
    case u: PythonUDF => u.name == MatchTrend.DisplayName
    case _ => false
  }
}

/**
 * Drops the rows whose event time is at or below `watermarkMs`, counting them in the
 * `numRowsDroppedByWatermark` of the stateful operator `operatorId` of the plan that runs
 * (found when the plan executes: later preparation rules copy the operator, and each copy
 * has metrics of its own), or in its own metric outside a SQL execution.
 */
private[cogra] case class LateRowsExec(
    child: SparkPlan,
    eventTime: Attribute,
    watermarkMs: Long,
    operatorId: Long) extends UnaryExecNode {

  override lazy val metrics: Map[String, SQLMetric] = Map(
    LateRows.Metric -> SQLMetrics.createMetric(sparkContext, "number of late rows dropped"))

  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = child.outputPartitioning

  private def operatorMetric: Option[SQLMetric] =
    Option(sparkContext.getLocalProperty(SQLExecution.EXECUTION_ID_KEY))
      .flatMap(id => Option(SQLExecution.getQueryExecution(id.toLong)))
      .flatMap(_.executedPlan.collectFirst {
        case op: TransformWithStateInPySparkExec if op.stateInfo.exists(_.operatorId == operatorId) =>
          op.metrics.get(LateRows.Metric)
      }.flatten)

  override protected def doExecute(): RDD[InternalRow] = {
    val ordinal = child.output.indexWhere(_.exprId == eventTime.exprId)
    val limit = watermarkMs * 1000L
    val metric = operatorMetric.getOrElse(longMetric(LateRows.Metric))
    child.execute().mapPartitionsInternal { rows =>
      rows.filter { row =>
        val late = !row.isNullAt(ordinal) && row.getLong(ordinal) <= limit
        if (late) metric.add(1L)
        !late
      }
    }
  }

  override protected def withNewChildInternal(newChild: SparkPlan): LateRowsExec = copy(child = newChild)
}
