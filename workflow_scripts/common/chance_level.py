"""Whether a classifier's score is one that guessing gets: an accuracy comparison (FP32 against
INT8, Table III) says nothing of a model that has not learned its images, since two models that
both guess agree to within chance. Guessing k of `classes` at random is right with probability
k/classes per image; a score within two binomial standard deviations of that is no better."""

import math


def guessing_bound(images, classes, k=1):
    """The most images right out of `images` that guessing top-k among `classes` explains."""
    p = min(1.0, k / classes)
    return images * p + 2 * math.sqrt(images * p * (1 - p))


def no_better_than_guessing(correct, images, classes, k=1):
    return correct <= guessing_bound(images, classes, k)


def describe(correct, images, classes, k=1):
    """One sentence for a table's note or a verdict's why."""
    top = "top-1" if k == 1 else f"top-{k}"
    return (
        f"FP32's {top} ({correct} of {images} images) is no better than guessing among {classes} classes "
        f"(up to {guessing_bound(images, classes, k):.0f} right by chance): its weights have not learned these "
        f"images (synthetic data, or too few steps), so INT8 agreeing with it says nothing of what INT8 loses"
    )
