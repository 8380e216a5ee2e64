package org.apache.spark.sql.cogra

import org.apache.spark.SparkEnv
import org.apache.spark.api.python.PythonEvalType
import org.apache.spark.sql.catalyst.analysis.{UnresolvedAlias, UnresolvedAttribute, UnresolvedFunction}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{Alias, Ascending, CreateStruct, Expression, FunctionTableSubqueryArgumentExpression, IsNull, Literal, NamedArgumentExpression, NamedExpression, Or, PythonUDF, PythonUDTFAnalyzeResult, PythonUDTFSelectedExpression, SortOrder}
import org.apache.spark.sql.classic
import org.apache.spark.sql.catalyst.parser.CatalystSqlParser
import org.apache.spark.sql.catalyst.plans.logical.{EventTimeWatermark, Filter, LogicalPlan, MapInArrow, Project, Repartition, RepartitionByExpression, Sort}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.errors.QueryCompilationErrors
import org.apache.spark.sql.execution.python.UserDefinedPythonTableFunctionAnalyzeRunner
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{BinaryType, StringType, StructType, TimestampType}

/**
 * Builds the plan of a `MATCH_TREND(TABLE(t), query, ...)` call.
 *
 * The call's arguments go, unchanged, to the Python handler's static `analyze` method (the
 * same one a plain Python UDTF registration uses, see `cogra.spark.register`). It returns:
 *  - the output schema (or raises cogra's QueryError / DataError: the call fails at analysis),
 *  - `partitionBy`: the query's plain sub-stream keys (rows that differ in them never meet),
 *  - `orderBy`: the time column,
 *  - `select`: the columns the query reads, plus, aliased `__cogra_filter__`, a predicate
 *    that every row the query can use satisfies (when there is one).
 * From these this builder makes a Filter and a Project right above the TABLE argument (so
 * Catalyst pushes them into the scan), repartitions by the keys, sorts each partition by
 * (keys, time) and runs one Arrow-streaming Python function per partition (MapInArrow).
 *
 * A PARTITION BY written after TABLE(...) is honoured as extra keys (each partition is then
 * evaluated on its own, as for any table function); ORDER BY is implied (time) and ignored;
 * WITH SINGLE PARTITION sends every row to one task.
 */
private[cogra] object MatchTrend {
  val FunctionName = "match_trend"
  val DisplayName = "MATCH_TREND"
  val PythonModule = "cogra.spark.udtf"
  val HandlerClass = "MatchTrendUDTF"
  val MapFactory = "make_map_function"
  val FilterAlias = "__cogra_filter__"
  val KeyPrefix = "__cogra_pk_"
  val EventTimeAlias = "__cogra_event_time"
  val IdentityAlias = "__cogra_identity__"
  val WirePrefix = "__cogra_wire__"
  val StreamArgument = "stream"
  val GroupKey = "__cogra_group"
  val StreamModule = "cogra.spark.streaming"
  val StreamFactory = "make_stream_command"
  val PackModule = "cogra.spark.stream_packing"
  val PackFactory = "make_pack_function"
  val PackName = "MATCH_TREND_PACK"
  /** `spark.cogra.streaming.operator`: `packed` (the default: each group's rows of a task
   * packed as one Arrow value, then transformWithStateInPandas) or `transformWithState`
   * (the rows themselves into transformWithStateInPandas, as pandas). */
  val OperatorSetting = "spark.cogra.streaming.operator"
  val TransformWithState = "transformWithState"
  val Packed = "packed"
  val PackedSchema: StructType = new StructType().add(GroupKey, StringType).add("payload", BinaryType)
    .add(EventTimeAlias, TimestampType)
  val StateStoreKey = "spark.sql.streaming.stateStore.providerClass"
  val RocksDBProvider = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
  /** RocksDB commits a micro-batch's changes as a changelog rather than a full checkpoint of
   * its files (Spark moves between the two formats either way on restart): about half the
   * commit time per micro-batch. Turned on where the session has not set it. */
  val ChangelogKey = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
  val SettingsPrefix = "spark.cogra."

  private def tableArgument(e: Expression): Option[FunctionTableSubqueryArgumentExpression] =
    e match {
      case t: FunctionTableSubqueryArgumentExpression => Some(t)
      case NamedArgumentExpression(_, t: FunctionTableSubqueryArgumentExpression) => Some(t)
      case _ => None
    }

  private def fail(message: String): Nothing =
    throw QueryCompilationErrors.tableValuedFunctionFailedToAnalyseInPythonError(message)

  def builder(args: Seq[Expression]): LogicalPlan = {
    val tables = args.flatMap(tableArgument)
    val exec = PythonCommands.pythonExec
    val handler = PythonCommands.function(
      PythonCommands.reference(PythonModule, HandlerClass), exec)
    // A streaming TABLE: the handler also selects what the stream needs (the query's
    // identity, columns' wire forms).
    val streaming = tables.size == 1 && tables.head.plan.isStreaming
    val callArgs =
      if (streaming) args :+ NamedArgumentExpression(StreamArgument, Literal(true)) else args
    // The handler checks every argument and explains what is wrong, including a missing TABLE.
    val analyzed = new UserDefinedPythonTableFunctionAnalyzeRunner(
      DisplayName, handler, callArgs, callArgs.map(tableArgument(_).isDefined), CatalystSqlParser)
      .runInPython()
    if (tables.size != 1) {
      fail(s"$DisplayName takes exactly one TABLE argument: " +
        s"$DisplayName(TABLE(t), 'RETURN ... PATTERN ...')")
    }
    if (tables.head.plan.isStreaming) {
      planStream(tables.head, analyzed, exec, watermarkArgument(args))
    } else {
      plan(tables.head, analyzed, exec)
    }
  }

  /** The `watermark => '30 seconds'` argument (checked by the Python analyze step). */
  private def watermarkArgument(args: Seq[Expression]): Option[String] = args.collectFirst {
    case NamedArgumentExpression(name, value) if name.equalsIgnoreCase("watermark") && value.foldable =>
      value.eval().toString
  }

  /**
   * A streaming TABLE argument: Spark's own stateful operator, transformWithStateInPandas in
   * event-time mode, keyed by the query's plain GROUP-BY keys and PARTITION BY as one JSON
   * string (`cogra.spark.streaming` holds the per-group processor):
   *
   *   TransformWithStateInPandas(__cogra_group)    the query's identity checked against the
   *     MapInArrow(pack)                             checkpoint (CheckpointIdentity); the
   *       Project(columns, event time, group)        writer's mode (StreamOutputMode)
   *         Filter(rows the query can use, or a NULL event time)
   *           [LateRowsExec]                       added per micro-batch (LateRows)
   *             EventTimeWatermark(event time)     every input row advances the watermark
   *               Project(*, event time)
   *                 <the TABLE argument's plan>
   *
   * `packed` (the default) packs each group's rows of a task as one Arrow value before the
   * operator; `transformWithState` sends the rows, in wire forms, instead. The filter
   * references the event time so that Catalyst keeps it above the watermark (it pushes
   * other filters below one): rows of types the pattern does not name are then still seen
   * by the watermark, and never reach the Python workers.
   */
  private def planStream(
      table: FunctionTableSubqueryArgumentExpression,
      analyzed: PythonUDTFAnalyzeResult,
      exec: String,
      watermark: Option[String]): LogicalPlan = {
    // The input's own watermark (withWatermark, or WATERMARK in SQL) serves when no
    // watermark => is given: the operator follows the query's global watermark.
    val ownWatermark = table.plan.collectFirst { case w: EventTimeWatermark => w.eventTime }
    if (watermark.isEmpty && ownWatermark.isEmpty) {
      fail(s"$DisplayName over a streaming table needs watermark => '30 seconds' (how late an " +
        "event may arrive), or a watermark on the input (withWatermark): a window's rows are " +
        "final only once no event of it can come any more")
    }
    if (watermark.isDefined && ownWatermark.isDefined) {
      fail(s"$DisplayName: the input has a watermark of its own (on ${ownWatermark.get.name}); " +
        "give either watermark => or the input's watermark, not both")
    }
    val selected = analyzed.selectedInputExpressions
    def aliased(s: PythonUDTFSelectedExpression, p: String => Boolean) = s.alias.exists(p)
    val filters = selected.filter(aliased(_, _ == FilterAlias))
    val eventTime = selected.find(aliased(_, _ == EventTimeAlias)).map(_.expression)
    val identity = selected.find(aliased(_, _ == IdentityAlias)).map(_.expression.eval().toString)
      .getOrElse(fail(s"$DisplayName: the handler gave a stream no identity"))
    val wires = selected.collect {
      case PythonUDTFSelectedExpression(e, Some(a)) if a.startsWith(WirePrefix) => a.stripPrefix(WirePrefix) -> e
    }.toMap
    val columns = selected.filterNot(s => aliased(s, a =>
      a == FilterAlias || a == EventTimeAlias || a == IdentityAlias || a.startsWith(WirePrefix)))
    val keyNames = analyzed.partitionByExpressions.map {
      case a: UnresolvedAttribute => a.nameParts.last
      case e => fail(s"$DisplayName: unexpected key ${e.sql}")
    }
    val session = SparkSession.active.asInstanceOf[classic.SparkSession]
    val operator = SQLConf.get.getConfString(OperatorSetting, Packed)
    checkSetting(OperatorSetting, operator)
    val packed = operator.trim.equalsIgnoreCase(Packed)
    // transformWithState keeps its state in RocksDB only: the session's default (HDFS-backed)
    // store is switched over; a store the user chose is an error that says so.
    if (!SQLConf.get.contains(ChangelogKey)) session.conf.set(ChangelogKey, "true")
    SQLConf.get.getConfString(StateStoreKey, "") match {
      case RocksDBProvider =>
      case "" => session.conf.set(StateStoreKey, RocksDBProvider)
      case other => fail(s"$DisplayName over a streaming table keeps its state with Spark's " +
        s"transformWithState, which needs $StateStoreKey=$RocksDBProvider, not $other")
    }
    Diagnostics.watchStreams(session)

    // The event time on every input row: ours (the time shifted, cogra.spark.event_time)
    // with its watermark, or the input's own watermark column under our name.
    // (The input's own watermark column, as the input outputs it: with its watermark.)
    val ownColumn = ownWatermark.flatMap(w => table.plan.output.find(_.exprId == w.exprId))
    val timed: Option[Expression] = watermark match {
      case Some(_) => eventTime
      case None => ownColumn
    }
    var child: LogicalPlan = table.plan
    timed.foreach { e =>
      // An alias would drop the watermark of the input's own column: it is kept explicitly.
      val metadata = ownColumn.filter(_ => watermark.isEmpty).map(_.metadata)
      child = Project(table.plan.output :+ Alias(e, EventTimeAlias)(explicitMetadata = metadata), child)
    }
    var rows = classic.Dataset.ofRows(session, child)
    watermark.foreach(delay => rows = rows.withWatermark(EventTimeAlias, delay))
    child = rows.logicalPlan
    val timeRef = UnresolvedAttribute.quoted(EventTimeAlias)
    filters.foreach { f =>
      child = Filter(if (timed.isDefined) Or(f.expression, IsNull(timeRef)) else f.expression, child)
    }
    // PARTITION BY: more keys of the stateful operator. A group's evaluation then sees one
    // partition's rows only, as each partition's own MATCH_TREND would.
    val userKeys = if (table.withSinglePartition) Nil else table.partitionByExpressions
    val userKeyNames = userKeys.indices.map(i => s"$KeyPrefix$i")
    // One key column whatever the keys: their values as JSON (one string per group, two
    // groups never share one). The state's key schema is then the same for every query, so
    // a restart with changed keys reaches CheckpointIdentity, which names the change, rather
    // than Spark's key-schema check, which names only the types.
    val keyJson = UnresolvedFunction("to_json", Seq(CreateStruct(
      keyNames.map(k => UnresolvedAttribute.quoted(k)) ++ userKeys.zip(userKeyNames).map {
        case (e, n) => Alias(e, n)() })), isDistinct = false)
    // The packed operator reads its rows as Arrow: no wire forms.
    val projectList = columns.map(c => wires.get(nameOf(c)) match {
        case Some(wire) if !packed => Alias(wire, nameOf(c))()
        case _ => named(c)
      }) ++
      (if (timed.isDefined) Seq(timeRef) else Nil) ++
      Seq(Alias(keyJson, GroupKey)())
    child = Project(projectList, child)
    val input = classic.Dataset.ofRows(session, child)
    val onOverflow = if (SQLConf.get.ansiEnabled) "error" else "null"
    def options(outputMode: String): String = "{" +
      s""""on_overflow": ${PythonCommands.jsonString(onOverflow)}, """ +
      s""""own_watermark": ${watermark.isEmpty}, "packed": $packed, """ +
      s""""output_mode": ${PythonCommands.jsonString(outputMode)}""" + "}"
    def command(outputMode: String) = PythonCommands.function(PythonCommands.call(StreamModule, StreamFactory,
      Seq(PythonCommands.Bytes(analyzed.pickledAnalyzeResult), PythonCommands.Str(options(outputMode)))), exec)
    // The state function: Append's; StreamOutputMode swaps in Update's when the query
    // writes in Update mode (the writer's mode is known only once the stream starts).
    def stateFunction(inputs: Seq[Expression]): PythonUDF = {
      val udf = PythonUDF(
        name = DisplayName,
        func = command("append"),
        dataType = analyzed.schema,
        children = inputs,
        evalType = PythonEvalType.SQL_TRANSFORM_WITH_STATE_PANDAS_UDF,
        udfDeterministic = true)
      CheckpointIdentity.register(udf, identity, userKeys.map(_.sql))
      StreamOutputMode.register(udf, command("update"))
      udf
    }
    val stateInput = if (packed) {
      // The packed rows carry their largest event time, under the input's watermark: the
      // stateful operator's event-time timers need a watermarked column (the rows are
      // never late there: LateRows dropped those before packing).
      val time = input.logicalPlan.output.find(_.name == EventTimeAlias).getOrElse(
        fail(s"$DisplayName: the input's watermark column is not among its columns"))
      val packedOutput = DataTypeUtils.toAttributes(PackedSchema).map {
        case a if a.name == EventTimeAlias => a.withMetadata(time.metadata)
        case a => a
      }
      val pack = PythonUDF(
        name = PackName,
        func = PythonCommands.function(PythonCommands.udfCall(PackModule, PackFactory, Seq(
          PythonCommands.Bytes(analyzed.pickledAnalyzeResult), PythonCommands.Str(options("append")))), exec),
        dataType = PackedSchema,
        children = input.logicalPlan.output,
        evalType = PythonEvalType.SQL_MAP_ARROW_ITER_UDF,
        udfDeterministic = true)
      classic.Dataset.ofRows(session, MapInArrow(
        pack, packedOutput, input.logicalPlan, isBarrier = false, profile = None))
    } else {
      input
    }
    stateInput.groupBy(stateInput.col(GroupKey))
      .transformWithStateInPandas(classic.ExpressionUtils.column(stateFunction(stateInput.logicalPlan.output)),
        analyzed.schema, "Append", "EventTime", null, "")
      .logicalPlan
  }

  /**
   * The settings that say how many tasks an executor runs at once, as a JSON object of
   * strings (null where unset): `master`, `executor_cores`, `task_cpus`. The Python side
   * (`cogra.spark.udtf_routing.task_slots`) reads them to tell whether each task has a processor
   * to spare for the JVM side of the Arrow stream while the engine computes.
   */
  def executorSettings: String = {
    val conf = Option(SparkEnv.get).map(_.conf)
    def setting(key: String): String =
      conf.flatMap(_.getOption(key)).map(PythonCommands.jsonString).getOrElse("null")
    s"""{"master": ${setting("spark.master")}, "executor_cores": ${setting("spark.executor.cores")}, """ +
      s""""task_cpus": ${setting("spark.task.cpus")}}"""
  }

  /**
   * The session's `spark.cogra.*` settings (e.g. `spark.cogra.worker.route`), as a JSON
   * object of strings, read when the call is planned: the Python side
   * (`cogra.spark.udtf_routing.WorkerSettings`) checks and applies them.
   */
  def cograSettings: String = {
    val settings = SQLConf.get.getAllConfs.toSeq.filter(_._1.startsWith(SettingsPrefix)).sortBy(_._1)
    settings.foreach { case (k, v) => checkSetting(k, v) }
    settings
      .map { case (k, v) => s"${PythonCommands.jsonString(k)}: ${PythonCommands.jsonString(v)}" }
      .mkString("{", ", ", "}")
  }

  /** A bad value of a known setting fails the call at analysis, not in every task. */
  private def checkSetting(key: String, value: String): Unit = key match {
    case "spark.cogra.worker.route" =>
      val routes = Seq("auto", "streamed", "chunked", "sliced")
      if (!routes.contains(value.trim.toLowerCase(java.util.Locale.ROOT))) {
        fail(s"$key must be one of ${routes.mkString(", ")}, not '$value'")
      }
    case OperatorSetting =>
      val operators = Seq(TransformWithState, Packed)
      if (!operators.exists(_.equalsIgnoreCase(value.trim))) {
        fail(s"$key must be one of ${operators.mkString(", ")}, not '$value'")
      }
    case "spark.cogra.worker.sliceRows" | "spark.cogra.worker.chunkRows" |
        "spark.cogra.worker.maxGroupRows" | "spark.cogra.maxWindowsPerEvent" =>
      if (value.trim.toIntOption.forall(_ < 1)) {
        fail(s"$key must be a positive number of rows, not '$value'")
      }
    case _ =>
  }

  private def nameOf(s: PythonUDTFSelectedExpression): String = (s.alias, s.expression) match {
    case (Some(a), _) => a
    case (None, a: UnresolvedAttribute) => a.nameParts.last
    case (None, n: NamedExpression) => n.name
    case (None, e) => fail(s"$DisplayName: selected input expression ${e.sql} needs an alias")
  }

  private def named(s: PythonUDTFSelectedExpression): NamedExpression = s match {
    case PythonUDTFSelectedExpression(e, Some(a)) => Alias(e, a)()
    case PythonUDTFSelectedExpression(n: NamedExpression, None) => n
    case PythonUDTFSelectedExpression(e, None) => UnresolvedAlias(e)
  }

  private def plan(
      table: FunctionTableSubqueryArgumentExpression,
      analyzed: PythonUDTFAnalyzeResult,
      exec: String): LogicalPlan = {
    val (filters, columns) = analyzed.selectedInputExpressions
      .filterNot(_.alias.exists(a =>  // a watermark => argument: streams only
        a == EventTimeAlias || a == IdentityAlias || a.startsWith(WirePrefix)))
      .partition(_.alias.contains(FilterAlias))
    if (columns.isEmpty) {
      fail(s"$DisplayName: the handler selected no input columns")
    }

    var child: LogicalPlan = table.plan
    filters.foreach(f => child = Filter(f.expression, child))

    val userKeys = if (table.withSinglePartition) Nil else table.partitionByExpressions
    val userKeyNames = userKeys.indices.map(i => s"$KeyPrefix$i")
    val projectList = columns.map(named) ++
      userKeys.zip(userKeyNames).map { case (e, n) => Alias(e, n)() }
    child = Project(projectList, child)

    val keys: Seq[Expression] =
      userKeyNames.map(UnresolvedAttribute.quoted) ++ analyzed.partitionByExpressions
    child = if (table.withSinglePartition || keys.isEmpty) {
      Repartition(numPartitions = 1, shuffle = true, child = child)
    } else {
      RepartitionByExpression(keys, child, None, None)
    }
    child = Sort(
      keys.map(k => SortOrder(k, Ascending)) ++ analyzed.orderByExpressions,
      global = false,
      child = child,
      hint = None)

    val onOverflow = if (SQLConf.get.ansiEnabled) "error" else "null"
    val diagnostics = Diagnostics.accumulator()
    val options = "{" +
      s""""diagnostics": ${diagnostics.map(_.id.toString).getOrElse("null")}, """ +
      s""""user_keys": [${userKeyNames.map(PythonCommands.jsonString).mkString(", ")}], """ +
      s""""on_overflow": ${PythonCommands.jsonString(onOverflow)}, """ +
      s""""executor": ${executorSettings}, """ +
      s""""settings": ${cograSettings}""" +
      "}"
    val command = PythonCommands.udfCall(PythonModule, MapFactory, Seq(
      PythonCommands.Bytes(analyzed.pickledAnalyzeResult),
      PythonCommands.Str(options)))
    val inputNames = columns.map(nameOf) ++ userKeyNames
    val udf = PythonUDF(
      name = DisplayName,
      func = PythonCommands.function(command, exec, diagnostics.orNull),
      dataType = analyzed.schema,
      children = inputNames.map(UnresolvedAttribute.quoted),
      evalType = PythonEvalType.SQL_MAP_ARROW_ITER_UDF,
      udfDeterministic = true)
    MapInArrow(
      udf,
      DataTypeUtils.toAttributes(analyzed.schema),
      child,
      isBarrier = false,
      profile = None)
  }
}
