package org.apache.spark.sql.cogra

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, PythonUDF}
import org.apache.spark.sql.catalyst.plans.physical.Partitioning
import org.apache.spark.sql.execution.{SQLExecution, SparkPlan, UnaryExecNode}
import org.apache.spark.sql.execution.metric.{SQLMetric, SQLMetrics}
import org.apache.spark.sql.execution.python.streaming.FlatMapGroupsInPandasWithStateExec
import org.apache.spark.sql.execution.streaming.operators.stateful.EventTimeWatermarkExec

/**
 * Late rows of the packed streaming operator: its stateful operator sees packed groups, not
 * rows, so Spark cannot drop late rows there; they are dropped here instead, right above the
 * watermark (MATCH_TREND's, or the input's own: a stream has one), before the pushed filter,
 * so every late input row counts; and counted in the stateful operator's own
 * `numRowsDroppedByWatermark`, which the query's progress reports.
 *
 * Late means at or below the watermark of the micro-batch that reads the row -- the largest
 * time seen in earlier batches minus the delay (SEMANTICS.md section 10) -- which is the
 * watermark the operator evicts state by in that batch.
 */
private[cogra] object LateRows {
  val Metric = "numRowsDroppedByWatermark"

  def insert(plan: SparkPlan): SparkPlan = plan.transformUp {
    case op: FlatMapGroupsInPandasWithStateExec
        if ours(op) && op.eventTimeWatermarkForEviction.isDefined && op.stateInfo.isDefined =>
      val watermarkMs = op.eventTimeWatermarkForEviction.get
      val operatorId = op.stateInfo.get.operatorId
      op.withNewChildren(Seq(op.child.transformUp {
        case w: EventTimeWatermarkExec => LateRowsExec(w, w.eventTime, watermarkMs, operatorId)
        case l: LateRowsExec => l.copy(watermarkMs = watermarkMs)
      }))
  }

  private def ours(op: FlatMapGroupsInPandasWithStateExec): Boolean = op.functionExpr match {
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
        case op: FlatMapGroupsInPandasWithStateExec if op.stateInfo.exists(_.operatorId == operatorId) =>
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
