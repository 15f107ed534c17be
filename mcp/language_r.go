package mcp

// DescribeR is run_r_code's description: the generic one, and what an R
// user (or a model writing R) needs besides: console semantics, the JSON
// forms of values, plots as images, the packages there are.
func DescribeR(l Language, o Options) string {
	return GenericDescription(l, o) + `

R runs as at its console: expression by expression in the global environment, each visible value printed to stdout; messages and warnings go to stderr as R prints them; an error ends the call with R's message.
The last visible value comes back as JSON: a vector of length 1 as a scalar, longer ones as arrays, named vectors and lists as objects, NA as null, a data frame as an array of row objects, a matrix as an array of rows, factors as their labels, dates as ISO strings.
Plots come back as images: plot() with no device open draws a PNG, and every page written by png(), jpeg(), svg() or pdf() during the call is returned.
Only R's base packages are available (base, stats, graphics, grDevices, utils, datasets, methods, grid, splines, stats4, tools, parallel, compiler); install.packages() cannot work, as there is no network. q(), system() and webr::canvas() are not available.`
}
