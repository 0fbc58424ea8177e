// data/corpus_text.cc — the hand-written part of the embedded corpus.
//
// Original prose written for gtp (redistributable under the project's
// license). Each entry is one document; corpus.cc puts them before the
// generated articles. Changing this text changes every byte-level run: bump
// data/VERSION and the golden hash in corpus_test.cc together.
#include "data/internal/corpus_text.h"

namespace gtp::data_internal {

const char* const kHandwrittenDocuments[] = {
    R"gtp(On sharing a weight

A large linear layer is a matrix that no single device wants to hold alone. Tensor
parallelism cuts it into slices and lets each device multiply its own slice; the
slices never meet, and the partial results are added or joined after the product.
Generalized tensor parallelism goes one step further. Each slice is cut again, into
as many pieces as there are peers in the sharding group, and every peer keeps only
its piece between steps. Just before the product, the peers gather the pieces back
into the slice; just after it, they drop the gathered copy. On the way back, the
gradient of the slice is reduced and scattered so that each peer again holds only
its own part. The weight is whole for a moment and sharded the rest of the time.

The trick is cheap when the gathers hide behind work that is already happening.
While layer three multiplies, the gather for layer four is already in flight; while
the backward pass computes the gradient of layer four, the gather for layer three
runs beside it. A chain of weights, each asking for the next before it returns, is
all the scheduling that this needs.

)gtp",
    R"gtp(A note on data lanes

Every rank reads data, but not every rank reads different data. Ranks that split one
matrix between them must see the same tokens, or their partial products would not
belong to the same sum. Ranks that hold whole copies of the model, or whole copies
apart from the sharded weights, may read different samples, and should, because
more samples per step is the point of having them. We call each group of ranks that
reads one stream of samples a data lane. The number of lanes is the data-parallel
size times the number of weight-sharding peers.

A global batch is cut into one slice per lane, and each slice into micro-batches.
The order of the samples does not depend on how many lanes there are: a run on one
lane and a run on eight read the same samples at the same step, only spread
differently. That is what lets a checkpoint written on one layout resume on
another and continue the same curve.

)gtp",
    R"gtp(What a checkpoint remembers

A checkpoint is a promise that a stopped run can start again as if nothing had
happened. It must remember the weights and the optimizer moments, of course, but
also the step, the state of every random stream, and how far the data loader had
read. If any one of these is forgotten, the resumed run drifts away from the run
that never stopped, and nobody can tell whether a change in the loss came from the
model or from the bookkeeping.

So the files carry a magic number and a version, every tensor carries a checksum,
and a new checkpoint becomes visible only after all of its files are written and
flushed. A torn write leaves the previous checkpoint untouched. When the layout
changes between save and load, each tensor is read back from whichever shards
cover the piece that a rank now owns.

)gtp",
    R"gtp(Notes from the training log

Step one. The loss begins near the logarithm of the vocabulary, as it should for a
model that knows nothing. The first few hundred steps teach it which bytes are
common: spaces, the letter e, the period at the end of a sentence. Then it learns
words, first the short ones that appear everywhere, then the longer ones that belong
to a topic. Later still it learns that a sentence which starts with a capital letter
tends to end with a period, and that a paragraph ends with an empty line.

When the learning rate warms up too fast, the loss jumps and the gradient norm grows
tenfold in a single step. Clipping the norm keeps the update bounded; skipping a step
whose loss is not a number keeps one bad batch from ruining the weights. Both events
are written to the log, so that a person reading it later can see what happened and
when.

)gtp",
    R"gtp(Why the tests run on threads

The same collective can be implemented by a network library, by a GPU library, or by
threads that share the memory of one process. The last of these is the easiest to
test: a dozen ranks start in a fraction of a second on a small machine, and a failure
prints one stack instead of a dozen logs. If the threaded version and the networked
version give the same numbers for the same inputs, a test written against one tells
us something true about the other.

A test that checks parallel training compares it with training on a single rank.
The sharded model must produce the same loss, step after step, within the tolerance
that floating point allows. When it does not, the test names the layout that failed,
and the first thing to look at is which group the failing layer read its peers from.

)gtp",
    R"gtp(Small models first

Before a recipe trains a large model on many devices, it should train a tiny one on a
laptop. A few layers, a few hundred steps, bytes instead of a learned vocabulary, and
a corpus that lives inside the program: the whole loop runs in a minute, and the loss
visibly falls. If it does not fall, something is wrong that no amount of hardware
would fix. Once the tiny model learns, the same code, with a larger configuration and
the fast kernels switched on, trains the large one.

The corpus for the tiny model is partly written by hand and partly produced by a
small grammar with a fixed seed. The grammar knows nouns and verbs, singular and
plural, a few ways to start a sentence and a few ways to end a paragraph. Its text
says nothing true, but it has the shape of English, and that shape is what a small
model can learn in a minute.

)gtp",
};

const size_t kNumHandwrittenDocuments =
    sizeof(kHandwrittenDocuments) / sizeof(kHandwrittenDocuments[0]);

}  // namespace gtp::data_internal
