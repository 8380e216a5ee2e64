/*
 * cogra: MATCH_TREND as a Spark SQL table-valued function.
 *
 * Enable with
 *   spark.sql.extensions=org.apache.spark.sql.cogra.CograExtensions
 * and the shim jar on the driver's class path (cogra.spark.session() does both).
 *
 * All COGRA logic is Python (the installed `cogra` package); this class only makes the
 * function name exist in every session built with the extension (PySpark, spark-sql, each
 * JDBC session of the Thrift server, each Spark Connect session) and plans the call as
 *
 *   MapInArrow(cogra.spark.udtf.make_map_function(..))      one Python call per Spark partition,
 *     Sort(keys ASC, time ASC, local)                        Arrow record batches streamed through,
 *       RepartitionByExpression(keys) | Repartition(1)       closed by row count (ArrowBatches)
 *         Project(columns the query needs)                   -> pruned scan schema
 *           Filter(rows the query can never use)             -> pushed to Parquet / DSv2 scans
 *             <the TABLE argument's plan>
 *
 * The output schema, the keys, the columns and the filter come from the Python handler's
 * `analyze` step (cogra.spark.udtf.MatchTrendUDTF.analyze), run while the query is analyzed,
 * so an invalid COGRA query fails before any job starts.
 */
package org.apache.spark.sql.cogra

import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.FunctionIdentifier
import org.apache.spark.sql.catalyst.expressions.{Expression, ExpressionInfo}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

/** The session extension: registers the MATCH_TREND table function. */
class CograExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    // Load every class of the shim now, through the loader that loads this one: a class
    // first needed later (at the first MATCH_TREND call) could find that loader closed
    // with the session that built it (the Thrift server closes a session's loader).
    MatchTrend.FunctionName.length
    PythonCommands.jsonString("")
    Diagnostics.AccumulatorName.length
    CheckpointIdentity.Directory.length
    StreamOutputMode.rule.ruleName.length
    UnfinishedCheckpointWrites.Logs.length
    ArrowBatches.MaxBytesKey.length
    Seq(classOf[ArrowBatchesExec], classOf[RowSizeCheckExec], classOf[RowBatchedRDD[_]], classOf[RowBatchedConf]).size
    extensions.injectTableFunction(
      (FunctionIdentifier(MatchTrend.FunctionName), CograExtensions.info, MatchTrend.builder _))
    // A batch MATCH_TREND's Arrow batches, closed by row count (no size check per row).
    extensions.injectPlannerStrategy(_ => ArrowBatches.Planning)
    // A streaming MATCH_TREND's micro-batch plans: the checkpoint checked, late rows dropped.
    extensions.injectColumnar(session => StreamPreparation.rule(session))
    // ... and the writer's output mode (Update: early rows of open windows).
    extensions.injectPostHocResolutionRule(_ => StreamOutputMode.rule)
    // ... and a first micro-batch's unfinished log writes removed, so that it restarts.
    extensions.injectPostHocResolutionRule(session => UnfinishedCheckpointWrites.rule(session))
  }
}

object CograExtensions {
  private[cogra] val info: ExpressionInfo = new ExpressionInfo(
    classOf[CograExtensions].getName,
    null,
    MatchTrend.FunctionName,
    "MATCH_TREND(TABLE(t), query [, type_column => 'type'] [, time_column => 'time']) - " +
      "evaluates a COGRA event trend aggregation query over the rows of t.",
    """
    Arguments:
      * input - TABLE(t): the events, one per row
      * query - a COGRA query: RETURN ... PATTERN ... [SEMANTICS ...] [WHERE ...]
          [GROUP-BY ...] [WITHIN ... [SLIDE ...]]
      * type_column - the column holding each event's type (default 'type')
      * time_column - the column holding each event's time (default 'time')
  """,
    "", // examples
    "", // note
    "", // group
    "", // since
    "", // deprecated
    "built-in")

  /** Builds the function's plan; exposed for tests and for callers holding expressions. */
  def buildMatchTrend(args: Seq[Expression]): LogicalPlan = MatchTrend.builder(args)
}
