package org.apache.spark.sql.cogra

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.{ColumnarRule, SparkPlan}

/**
 * What a streaming MATCH_TREND's micro-batch plan needs once Spark has prepared it:
 * its checkpoint checked against the query (`CheckpointIdentity`), and late rows dropped
 * and counted right above the watermark (`LateRows`).
 *
 * A columnar rule, because Spark applies those while preparing each micro-batch's physical
 * plan on the driver, after its incremental planner has given every stateful operator its
 * state location and watermarks, and before any task starts. A planner strategy or an
 * optimizer rule would see neither; a query listener could not stop the query.
 */
private[cogra] object StreamPreparation {
  def rule(session: SparkSession): ColumnarRule = new ColumnarRule {
    override def preColumnarTransitions: Rule[SparkPlan] = new Rule[SparkPlan] {
      override def apply(plan: SparkPlan): SparkPlan = {
        CheckpointIdentity.checkPlan(session, plan)
        LateRows.insert(plan)
      }
    }
  }
}
