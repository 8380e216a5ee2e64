package org.apache.spark.sql.cogra

import java.util.concurrent.ConcurrentHashMap

import org.apache.spark.api.python.PythonFunction
import org.apache.spark.sql.catalyst.expressions.{ExprId, PythonUDF}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, TransformWithStateInPySpark}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.streaming.InternalOutputModes
import org.apache.spark.sql.execution.streaming.sources.{WriteToMicroBatchDataSource, WriteToMicroBatchDataSourceV1}
import org.apache.spark.sql.streaming.OutputMode

/**
 * The writer's output mode, brought to a streaming MATCH_TREND's operator: in Update mode
 * (`writeStream.outputMode("update")`) each group also emits, after every micro-batch, the
 * current rows of its open windows that changed (`cogra.spark.streaming`).
 *
 * MATCH_TREND is planned when its DataFrame is analyzed, before any writer exists; the
 * mode is known only in each micro-batch's plan, whose root is the sink's write node. This
 * optimizer rule reads it there and swaps the operator's Python function for the Update
 * one built beside it (`register`). Why not a `output_mode =>` argument: the writer
 * already says it, and two places to say it could disagree.
 */
private[cogra] object StreamOutputMode {
  private val updates = new ConcurrentHashMap[ExprId, PythonFunction]()

  /** `update`: the function of `udf`'s operator in Update mode. */
  def register(udf: PythonUDF, update: PythonFunction): Unit = updates.put(udf.resultId, update)

  val rule: Rule[LogicalPlan] = new Rule[LogicalPlan] {
    override def apply(plan: LogicalPlan): LogicalPlan = if (updates.isEmpty) plan else plan match {
      case w: WriteToMicroBatchDataSourceV1 => withMode(w, w.outputMode)
      case w: WriteToMicroBatchDataSource => withMode(w, w.outputMode)
      case _ => plan
    }
  }

  private def withMode(plan: LogicalPlan, mode: OutputMode): LogicalPlan =
    if (mode != InternalOutputModes.Update) plan else plan.transformDown {
      case t: TransformWithStateInPySpark => t.functionExpr match {
        case u: PythonUDF if updates.containsKey(u.resultId) =>
          t.copy(functionExpr = u.copy(func = updates.get(u.resultId)))
        case _ => t
      }
    }
}
