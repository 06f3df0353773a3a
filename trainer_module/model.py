"""The built-in Keras model and loss: an MLP with numeric embeddings and an ensemble head, after
the tabular deep-learning literature that matches gradient boosting with an MLP:

- numeric embeddings (Gorishniy et al. 2022, "On Embeddings for Numerical Features"): each
  numeric column's piecewise-linear encoding on its training quantiles (PLE), computed here from
  the position Transform gives it (`<column>_q`, trainer_module/preprocessing.py: bin t's share
  is clip(position - t, 0, 1)), with its softly clipped z-score and its missing flag, then a
  linear map of its own and a ReLU: a column whose values name things (a flight's distance, an
  hour) gets a step where a tree would split, not one slope;
- text and code columns as embeddings of their vocabulary index, the whole tables stacked in one
  variable (trainer_module/table_stack.py: one lookup and one optimizer update for all of them,
  weight for weight the model of one Embedding per feature);
- each table's value's target statistics (trainer_module/target_statistics.py: its fit rows'
  share of each class, or mean label; a row's own fold left out in training), beside its
  embedding, or instead of it where the table's values average fewer than
  trainer.embedding_min_rows fit rows (learned from two rows, an embedding costs more than it gives);
- a TabM-mini ensemble head (Gorishniy et al., ICLR 2025): k members share the backbone (dense
  layers with dropout), each scales the backbone's input by its own vector (initialized to random
  signs) and has its own output layer. In training the model returns every member's outputs,
  [batch, k, outputs], and the loss is the mean of the members' losses (each member learns
  alone); in inference it returns their mean, [batch, outputs]: the mean of the members'
  probabilities as log-probabilities (a softmax of them gives the mean), or of their values.

Everything is static-shape and uses no statistics across a batch (no BatchNormalization), so N
replicas make one device's update (trainer_module/equivalence.py). Under mixed precision the
numeric embeddings and the members' mean and softmax are computed in float32, the rest in 16
bits.
"""

from __future__ import annotations

import tensorflow as tf

from trainer_module import features, settings, sharded_embedding, table_plan, table_stack
from trainer_module import layer_walk, row_dropout, target_statistics
from trainer_module.ensemble_head import EnsembleHead
from trainer_module.autograph_rules import plain, users

# A z-score's soft clip, z / sqrt(1 + (z / CLIP)^2): about z inside +-CLIP, bounded past it. It
# was 3 until 2026-12-06, and flattened a column past three standard deviations, where ISLR
# Wage's wage is exp(logwage): at 10 Wage's held-out R2 0.9975 -> 0.9986, Caravan's AUC
# 0.7642 -> 0.7677 (docs/training.md).
CLIP = 10.0


@tf.keras.utils.register_keras_serializable(package="lockstep")
class NumericEmbedding(tf.keras.layers.Layer):
    """[batch, n, 3] (position, z-score, missing flag of n columns) -> [batch, n * dim]: each
    column's piecewise-linear encoding over `bins` quantile bins, its softly clipped z-score and
    its flag, through a linear map of its own, then a ReLU."""

    def __init__(self, bins: int, dim: int, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.bins, self.dim, self.seed = bins, dim, seed

    def build(self, input_shape):
        n = int(input_shape[1])
        width = self.bins + 2
        self.kernel = self.add_weight(
            "kernel", [n, width, self.dim],
            initializer=tf.keras.initializers.RandomUniform(
                -width ** -0.5, width ** -0.5, seed=self.seed))
        self.bias = self.add_weight(
            "bias", [n, self.dim], initializer=tf.keras.initializers.RandomUniform(
                -width ** -0.5, width ** -0.5, seed=self.seed + 1))

    @plain  # traced as written: trainer_module/autograph_rules.py
    def call(self, x):
        position, z, missing = x[:, :, 0:1], x[:, :, 1:2], x[:, :, 2:3]
        steps = tf.range(self.bins, dtype=x.dtype)
        encoded = tf.concat([tf.clip_by_value(position - steps, 0.0, 1.0),
                             z * tf.math.rsqrt(1.0 + tf.square(z / CLIP)), missing], axis=2)
        out = tf.nn.relu(tf.einsum("bnw,nwd->bnd", encoded, tf.cast(self.kernel, x.dtype))
                         + tf.cast(self.bias, x.dtype))
        return tf.reshape(out, [-1, out.shape[1] * self.dim])

    def get_config(self):
        return {**super().get_config(), "bins": self.bins, "dim": self.dim, "seed": self.seed}


def _group(column: str) -> tuple[str, str, str]:
    """A numeric column's features as the built-in preprocessing names them: its quantile
    position, its z-score and its missing flag (trainer_module/features.py)."""
    return (features.position_name(column), features.transformed_name(column),
            features.missing_flag_name(column))


def numeric_groups(numeric: list[str]) -> tuple[list[str], list[str]]:
    """(the columns whose position, z-score and missing flag are all among the float features;
    the other float features, each a number of its own)."""
    names = set(numeric)
    suffix = features.POSITION_SUFFIX
    stems = [key[: -len(suffix)] for key in numeric if key.endswith(suffix)]
    grouped = sorted(stem for stem in stems if set(_group(stem)) <= names)
    taken = {name for stem in grouped for name in _group(stem)}
    return grouped, sorted(names - taken)


def numeric_inputs(numeric: list[str], packed: int = 0) -> dict:
    """The model's float inputs: one a feature, and features.NUMERIC_COLUMNS of `packed` columns
    ([batch, packed, 3]) where there are any."""
    inputs = {key: tf.keras.Input(shape=(), name=key, dtype=tf.float32) for key in numeric}
    if packed:
        inputs[features.NUMERIC_COLUMNS] = tf.keras.Input(
            shape=(packed, features.PACKED_PARTS), name=features.NUMERIC_COLUMNS, dtype=tf.float32)
    return inputs


def tabular(numeric: list[str], categorical: dict[str, int], outputs: int, task: str,
            cfg: settings.TrainerConfig | None = None, *, packed: int | None = None,
            shards: dict[str, int] | None = None,
            server_blocks: dict[str, int] | None = None) -> tf.keras.Model:
    """The built-in model (the module's docstring). outputs: classes (logits in training,
    log-probabilities in inference), or 1 for a regression.

    numeric: the float features, each a number; packed: the numeric columns that come in one
    tensor, features.NUMERIC_COLUMNS (the built-in preprocessing's, TransformSpec.packed): the
    same model as their three features each would give, in one input (None: none).

    cfg: its shape and seed (trainer.hidden_units, embedding_dim, ensemble_members (1: one
    MLP), dropout, l2, seed); None: TrainerConfig's defaults, the model a run trains. They are
    written there only.

    shards: {categorical feature: blocks} for the tables split by rows over the replicas
    (trainer_module/sharded_embedding.py; 1: one block, on one device; absent: a table on every
    replica, in the stack). With any, the
    model is the tables' lookups (`ShardedEmbedding`, named `embed_<feature>` as the Embedding
    it stands for) then CORE, the rest of the model, which takes those features' rows: the
    training step looks the rows up itself (`sharded_parts`).

    server_blocks: {categorical feature: parts} for the tables split over the parameter
    servers of a ParameterServerStrategy (its variable partitioner: plain Embeddings)."""
    cfg = cfg or settings.TrainerConfig()
    sharded = {k: n for k, n in (shards or {}).items() if n >= 1 and k in categorical}
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if replicas > 1 and 1 in sharded.values():  # each replica would update that block alone
        raise ValueError(f"tables in one block are one device's, not {replicas} replicas': "
                         f"{sorted(k for k, n in sharded.items() if n == 1)}")
    if sharded:
        core = _tabular(numeric, categorical, outputs, task, cfg, packed=packed,
                        given=set(sharded), name=CORE)
        inputs = numeric_inputs(numeric, packed)
        x = dict(inputs)
        for i, (key, size) in enumerate(sorted(categorical.items())):
            inputs[key] = x[key] = tf.keras.Input(shape=(), name=key, dtype=tf.int64)
            if key in sharded:
                x[key] = sharded_embedding.ShardedEmbedding(
                    size, cfg.embedding_dim, sharded[key],
                    table_stack.table_initializer(cfg.embedding_dim, cfg.seed, i),
                    name=table_stack.layer_name(key))(inputs[key])
        return tf.keras.Model(inputs, core(target_statistics.with_ids(core, x, inputs)))
    return _tabular(numeric, categorical, outputs, task, cfg, packed=packed,
                    server_blocks=server_blocks)


CORE = "tabular_core"


def sharded_parts(model: tf.keras.Model):
    """(the model a training step differentiates, {feature: its ShardedEmbedding}): a model
    with sharded tables gives its CORE and its tables; any other, itself and {}."""
    tables = {table_stack.feature_of(layer.name): layer for layer in model.layers
              if isinstance(layer, sharded_embedding.ShardedEmbedding)}
    if not tables:
        return model, {}
    return model.get_layer(CORE), tables


def split_tables(model: tf.keras.Model) -> tuple[table_plan.Table, ...]:
    """The model's tables split over the replicas (or the parameter servers), as the summary
    says them (not a one-device run's: one block each)."""
    tables = sharded_parts(model)[1]
    split = tuple(table_plan.Table(key, tables[key].rows, tables[key].dim, tables[key].shards)
                  for key in sorted(tables) if tables[key].shards > 1)
    served = sharded_embedding.server_split(model)
    return split + tuple(
        table_plan.Table(table_stack.feature_of(name), *served[name].shape.as_list(),
                         len(served[name].variables), holders="parameter servers")
        for name in sorted(served))


def unsharded(model: tf.keras.Model) -> tf.keras.Model:
    """The model with each sharded table whole, a Keras Embedding of the same name holding its
    rows, in this process's memory: what is exported and served (no strategy there). Its
    other layers are the model's own. A model without sharded tables: itself."""
    core, tables = sharded_parts(model)
    if not tables:
        return model
    inputs = layer_walk.inputs_like(model)
    x = dict(inputs)
    for key, table in tables.items():
        # Made from the gathered rows: no draw of a whole table to overwrite, no second copy.
        embedding = tf.keras.layers.Embedding(
            table.rows, table.dim, name=table.name,
            embeddings_initializer=_Given(table.blocks.gathered()))
        x[key] = embedding(inputs[key])
        embedding.embeddings_initializer = tf.keras.initializers.get("uniform")  # its config
    return tf.keras.Model(inputs, core(target_statistics.with_ids(core, x, inputs)))


class _Given(tf.keras.initializers.Initializer):
    """An initializer that gives a tensor already made (the rows of a table split over the
    replicas, gathered whole)."""

    def __init__(self, value: tf.Tensor):
        self.value = value

    def __call__(self, shape, dtype=None, **kwargs):
        return self.value


def logical_weights(model: tf.keras.Model) -> list:
    """The variables of `unsharded(model)` (each split table whole), by name and, among those of
    one name, by place: the same list for the same model however its tables are split or
    stacked (each stacked table a `table_stack.TableSlice` of its name), and whatever order its
    layers were built in."""
    seen: dict[str, int] = {}
    keyed = []
    whole = unsharded(model)
    for name, weight in table_stack.by_table(whole, [(w.name, w) for w in whole.weights]):
        seen[name] = seen.get(name, -1) + 1
        keyed.append(((name, seen[name]), weight))
    return [weight for _, weight in sorted(keyed, key=lambda pair: pair[0])]


def set_logical_weights(model: tf.keras.Model, values: list) -> None:
    """Sets the model's weights from values in `logical_weights`' order, each split table's rows
    into its blocks."""
    variables = logical_weights(model)
    if len(variables) != len(values):
        raise ValueError(f"{len(values)} values for the {len(variables)} weights of {model.name}")
    for variable, value in zip(variables, values):
        variable.assign(value)
    for table in sharded_parts(model)[1].values():
        [whole] = [v for v in variables if v.name == f"{table.name}/embeddings:0"]
        table.assign_whole(whole.numpy())


def _tabular(numeric, categorical, outputs, task, cfg: settings.TrainerConfig, packed=0,
             given=(), name=None, server_blocks=None) -> tf.keras.Model:
    """The built-in model; the categorical features in `given` come as their rows ([batch,
    embedding_dim] floats), not as ids; those in `server_blocks` have their table split in that
    many parts over the parameter servers (sharded_embedding.SERVER_SPLIT)."""
    server_blocks = server_blocks or {}
    embedding_dim, seed = cfg.embedding_dim, cfg.seed
    inputs, parts, dropped = numeric_inputs(numeric, packed), [], []
    grouped, plain = numeric_groups(numeric)
    blocks = [inputs[features.NUMERIC_COLUMNS]] if packed else []
    if grouped:
        blocks.append(tf.stack([tf.stack([inputs[name] for name in _group(c)], axis=1)
                                for c in grouped], axis=1))  # [batch, n, 3]
    if blocks:
        stacked = blocks[0] if len(blocks) == 1 else tf.concat(blocks, axis=1)
        # In float32 under mixed precision too: bfloat16's 8 bits would round a position of
        # 40.3 to 40.25, and the encoding is a small part of the step.
        parts.append(NumericEmbedding(features.QUANTILE_BINS, embedding_dim, seed=seed + 200,
                                      name="numeric_embedding", dtype="float32")(stacked))
        dropped.append(0)  # trainer.column_dropout: each column's embedding, a block
    if plain:
        parts.append(tf.stack([inputs[key] for key in plain], axis=1))
    order = sorted(categorical)
    # Hashed into a row's fold (target statistics) and its dropout key: every float input, and
    # each table's ids (a table whose rows come in: its ids too, as an input of their own).
    hashed, ids = ([features.NUMERIC_COLUMNS] if packed else []) + sorted(numeric), {}
    keyed = cfg.dropout or cfg.column_dropout  # a dropout's masks keyed on the row
    if order:
        rows = {}  # the features whose rows come in, or from a table of their own
        for i, key in enumerate(order):
            if key in given:
                inputs[key] = rows[key] = tf.keras.Input(shape=(embedding_dim,), name=key,
                                                         dtype=tf.float32)
                continue
            inputs[key] = tf.keras.Input(shape=(), name=key, dtype=tf.int64)
            if server_blocks.get(key, 1) > 1:
                # Built here (a functional call): under ParameterServerStrategy, split over
                # the servers, a table of its own.
                with sharded_embedding.SERVER_SPLIT.splitting(server_blocks[key]):
                    rows[key] = tf.keras.layers.Embedding(
                        categorical[key], embedding_dim, name=table_stack.layer_name(key),
                        embeddings_initializer=table_stack.table_initializer(
                            embedding_dim, seed, i))(inputs[key])
        stacked = [[key, categorical[key], i] for i, key in enumerate(order) if key not in rows]
        if stacked:
            tables = table_stack.TableStack(stacked, embedding_dim, order, seed,
                                            name=table_stack.NAME)(
                {key: rows.get(key, inputs[key]) for key in order})
        else:
            tables = (rows[order[0]] if len(order) == 1
                      else tf.keras.layers.Concatenate()([rows[key] for key in order]))
        counted = target_statistics.counted_tables(categorical, task, outputs, cfg)
        ids = {key: inputs[key] if key not in given else target_statistics.ids_input(inputs, key)
               for key in order if keyed or key in dict(counted)}
        if counted:
            tables = target_statistics.TargetStatistics(  # [the tables' rows, kept or not; statistics]
                counted, hashed, target_statistics.widths(task, outputs), order=order,
                dim=embedding_dim, min_rows=cfg.embedding_min_rows, name=target_statistics.NAME)(
                {**{key: ids[key] for key, _ in counted}, **{key: inputs[key] for key in hashed},
                 target_statistics.ROWS: tables})
        dropped.append(len(parts))  # each table's row, a block (its statistics are not)
        parts.extend(tables if isinstance(tables, list) else [tables])
    key = (row_dropout.row_key([inputs[k] for k in hashed] + [ids[k] for k in sorted(ids)])
           if keyed else None)
    for i in dropped if cfg.column_dropout else ():
        parts[i] = row_dropout.RowDropout(cfg.column_dropout, block=embedding_dim,
                                          salt=seed + 300 + i, name=f"column_dropout_{i}")(
            [parts[i], key])
    x = parts[0] if len(parts) == 1 else tf.keras.layers.Concatenate()(parts)
    out = EnsembleHead(max(cfg.ensemble_members, 1), cfg.hidden_units, outputs, task,
                       cfg.dropout, cfg.l2, seed=seed, name="ensemble")(
        [x, key] if cfg.dropout else x)
    return tf.keras.Model(inputs, out, name=name)


def per_member(per_example_loss):
    """A per-example loss over [batch, outputs] made to take an ensemble's training outputs too,
    [batch, k, outputs]: each member's loss on the example, their mean per example. The built-in
    loss and a user's (trainer.loss) with the built-in model go through it; a user's is
    converted by AutoGraph where it is called (autograph_rules.users)."""
    each_member = users(per_example_loss)

    @plain
    def loss(labels, outputs):
        if outputs.shape.rank != 3:
            return each_member(labels, outputs)
        k = tf.shape(outputs)[1]
        labels = tf.reshape(labels, [-1])
        each = each_member(tf.repeat(labels, k), tf.reshape(outputs, [-1, outputs.shape[2]]))
        return tf.reduce_mean(tf.reshape(each, [-1, k]), axis=1)

    return loss


def builtin_loss(task: str):
    """Per-example losses (reduction NONE): the trainer divides by the *global* batch itself.
    Outputs of an ensemble in training, [batch, k, outputs], give the mean of the members'
    losses per example (`per_member`)."""
    if task == settings.REGRESSION:
        @plain
        def squared_error(labels, outputs):
            outputs = tf.cast(outputs, tf.float32)
            return tf.square(outputs[:, 0] - tf.reshape(tf.cast(labels, tf.float32), [-1]))
        return per_member(squared_error)

    @plain
    def cross_entropy(labels, outputs):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.cast(tf.reshape(labels, [-1]), tf.int64), tf.cast(outputs, tf.float32))
    return per_member(cross_entropy)
