package org.apache.spark.sql.cogra

import java.util.concurrent.ConcurrentHashMap

import org.apache.spark.api.python.PythonFunction
import org.apache.spark.sql.catalyst.expressions.{ExprId, PythonUDF}
import org.apache.spark.sql.catalyst.plans.logical.{AnalysisHelper, LogicalPlan, TransformWithStateInPySpark}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.streaming.{InternalOutputModes, WriteToStream}

/**
 * The writer's output mode, brought to a streaming MATCH_TREND's operator: in Update mode
 * (`writeStream.outputMode("update")`) each group also emits, after every micro-batch, the
 * current rows of its open windows that changed (`cogra.spark.streaming`).
 *
 * MATCH_TREND is planned when its DataFrame is analyzed, before any writer exists. When the
 * writer starts the query, Spark analyzes the query once more under a `WriteToStream` node
 * that holds the output mode, and runs every micro-batch from that plan: this post-hoc
 * resolution rule swaps, there, the operator's Python function for the Update one built
 * beside it (`register`). Why not an `output_mode =>` argument: the writer already says
 * it, and two places to say it could disagree.
 */
private[cogra] object StreamOutputMode {
  private val updates = new ConcurrentHashMap[ExprId, PythonFunction]()

  /** `update`: the function of `udf`'s operator in Update mode. */
  def register(udf: PythonUDF, update: PythonFunction): Unit = updates.put(udf.resultId, update)

  val rule: Rule[LogicalPlan] = new Rule[LogicalPlan] {
    override def apply(plan: LogicalPlan): LogicalPlan = plan match {
      case w: WriteToStream if w.outputMode == InternalOutputModes.Update && !updates.isEmpty =>
        AnalysisHelper.allowInvokingTransformsInAnalyzer {
          w.copy(inputQuery = w.inputQuery.transformDown {
            case t: TransformWithStateInPySpark => t.functionExpr match {
              case u: PythonUDF if updates.containsKey(u.resultId) =>
                t.copy(functionExpr = u.copy(func = updates.get(u.resultId)))
              case _ => t
            }
          })
        }
      case _ => plan
    }
  }
}
