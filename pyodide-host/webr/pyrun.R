# pyrun's R side of the R worker (main.ts evaluates this file once, at
# start-up). It returns one environment of functions; main.ts keeps a handle
# on it and calls run() for every call. Nothing here is on the search path,
# so user code does not see it by accident (it is no security boundary:
# Deno's permissions are).
local({
  pyrun <- environment()
  plot_dir <- "/pyrun/plots"
  dir.create(plot_dir, recursive = TRUE, showWarnings = FALSE)
  dir.create("/output", showWarnings = FALSE)

  # Files a graphics device was opened on during the running call:
  # list(pattern, mime), pattern as the device got it (%d for pages).
  plots <- list()
  plot_count <- 0L
  call_start <- Sys.time()

  record_plot <- function(filename, mime) {
    filename <- path.expand(filename)
    if (!startsWith(filename, "/")) filename <- file.path(getwd(), filename)
    plots[[length(plots) + 1L]] <<- list(pattern = filename, mime = mime)
  }

  # Every file device of grDevices records its file, so that each page
  # any of them writes comes back as a display (docs/protocol.md, Engines: R).
  # The wrapper keeps the device's own formals and body: only one call is
  # put in front of it.
  devices <- list(
    png = "image/png", jpeg = "image/jpeg", bmp = "image/bmp", tiff = "image/tiff",
    svg = "image/svg+xml", pdf = "application/pdf", cairo_pdf = "application/pdf"
  )
  name_arg <- c(pdf = "file", cairo_pdf = "filename")
  ns <- asNamespace("grDevices")
  pkg <- as.environment("package:grDevices")
  replace_binding <- function(env, name, value) {
    if (!exists(name, envir = env, inherits = FALSE)) return(invisible())
    locked <- bindingIsLocked(name, env)
    if (locked) unlockBinding(name, env)
    assign(name, value, envir = env)
    if (locked) lockBinding(name, env)
  }
  for (dev in names(devices)) {
    orig <- get(dev, envir = ns)
    arg <- if (dev %in% names(name_arg)) name_arg[[dev]] else "filename"
    wrapped <- orig
    # pdf(file = NULL) writes nothing: only a name is recorded.
    rec <- call("if", call("is.character", as.name(arg)),
                as.call(list(record_plot, as.name(arg), devices[[dev]])))
    body(wrapped) <- call("{", rec, body(orig))
    replace_binding(ns, dev, wrapped)
    replace_binding(pkg, dev, wrapped)
  }

  # The device a plot opens when none is open: a PNG in pyrun's own folder,
  # one file per page.
  default_device <- function(...) {
    plot_count <<- plot_count + 1L
    grDevices::png(file.path(plot_dir, sprintf("plot-%d-%%03d.png", plot_count)),
                   width = 672, height = 480)
  }

  # webR's canvas() device needs a browser's OffscreenCanvas: in Deno it
  # ends the process. eval_js runs JavaScript in R's thread: only Deno's
  # permissions bound it, and pyrun offers no such door. q() would end R
  # and with it the worker.
  refuse <- function(what, why) {
    force(what)
    force(why)
    function(...) stop(sprintf("%s is not available in pyrun: %s", what, why), call. = FALSE)
  }
  webr_ns <- asNamespace("webr")
  # R's console lines reach main.ts as webR's stdout and stderr messages
  # while a call runs. Emscripten holds a line until its newline: a text
  # left without one (cat("x")) would start the next call's first line, so
  # run() and cleanup() hand it on. The JavaScript runs in R's thread,
  # through eval_js as it was before it is taken away below.
  js <- get("eval_js", envir = webr_ns)
  # marker: a line written after the held text, to fd 1 below R (so that
  # no sink() diverts it), by which main.ts knows it has read every line
  # the call wrote: webR's answer to the call can overtake the last ones.
  flush_console <- function(marker = "") {
    end <- if (nzchar(marker)) {
      paste0("{ const s = Module.FS.getStream(1); const b = new TextEncoder().encode(",
        deparse(paste0(marker, "\n")), "); Module.FS.write(s, b, 0, b.length); } ")
    } else ""
    js(paste0("for (const fd of [1, 2]) { const s = Module.FS.getStream(fd); if (s && s.tty) s.stream_ops.fsync(s); }; ", end, "0"))
    invisible()
  }
  replace_binding(webr_ns, "canvas", refuse("webr::canvas()", "use png() or svg(); plots come back as images"))
  replace_binding(webr_ns, "eval_js", refuse("webr::eval_js()", "R code runs without JavaScript"))
  for (name in c("eval_js_async", "install", "mount", "unmount")) {
    replace_binding(webr_ns, name, refuse(sprintf("webr::%s()", name), "not in this sandbox"))
  }
  if ("package:webr" %in% search()) {
    for (name in c("canvas", "eval_js", "install", "mount", "unmount")) {
      replace_binding(as.environment("package:webr"), name, get(name, envir = webr_ns))
    }
  }
  for (name in c("q", "quit")) {
    replace_binding(baseenv(), name, refuse(paste0(name, "()"), "the worker serves the next call"))
  }
  replace_binding(baseenv(), "system", refuse("system()", "there are no processes"))
  replace_binding(baseenv(), "system2", refuse("system2()", "there are no processes"))

  # Reading the environment takes R some milliseconds (Sys.getenv()), so
  # reset() restores it only after a call that changed it through these.
  env_dirty <- FALSE
  set_env <- Sys.setenv
  unset_env <- Sys.unsetenv
  for (name in c("Sys.setenv", "Sys.unsetenv")) {
    orig <- get(name, envir = baseenv())
    marked <- orig
    body(marked) <- call("{", quote(pyrun_env_changed()), body(orig))
    environment(marked) <- list2env(list(pyrun_env_changed = function() env_dirty <<- TRUE), parent = environment(orig))
    replace_binding(baseenv(), name, marked)
  }

  options(device = default_device)
  baseline <- list(
    options = options(),
    search = search(),
    env = Sys.getenv(),
    wd = getwd()
  )

  write_err <- function(text) cat(text, file = stderr())

  format_call <- function(call) paste(deparse(call, nlines = 1L), collapse = "")

  # The call a condition names, unless it is pyrun's own eval of a
  # top-level expression (stop("x") at top level says just "Error: x").
  user_call <- function(cond) {
    call <- conditionCall(cond)
    if (is.null(call) || identical(call, quote(eval(expr, globalenv())))) return(NULL)
    call
  }

  condition_text <- function(kind, cond) {
    call <- user_call(cond)
    msg <- conditionMessage(cond)
    if (is.null(call)) sprintf("%s: %s", kind, msg) else sprintf("%s in %s : %s", kind, format_call(call), msg)
  }

  show_value <- function(value) {
    if (isS4(value)) methods::show(value) else print(value)
  }

  # run() evaluates the code in the global environment, expression by
  # expression, printing each visible value as R's console does. It
  # returns list(status, error, value, has_value); value is to_plain() of
  # the last expression's value when that was visible.
  run <- function(code, marker = "") {
    on.exit(flush_console(marker))
    plots <<- list()
    call_start <<- Sys.time()
    exprs <- tryCatch(parse(text = code, keep.source = FALSE), error = function(e) e)
    if (inherits(exprs, "error")) {
      return(list(status = "run-error", error = paste0("Error: ", conditionMessage(exprs))))
    }
    last <- list(visible = FALSE)
    status <- tryCatch(
      withCallingHandlers(
        {
          for (expr in exprs) {
            last <- list(visible = FALSE)
            last <- withVisible(eval(expr, globalenv()))
            if (last$visible) show_value(last$value)
          }
          list(status = "success")
        },
        warning = function(w) {
          if (getOption("warn", 0) >= 0) write_err(paste0(condition_text("Warning", w), "\n"))
          invokeRestart("muffleWarning")
        },
        message = function(m) {
          write_err(conditionMessage(m))
          invokeRestart("muffleMessage")
        }
      ),
      error = function(e) list(status = "run-error", error = condition_text("Error", e)),
      interrupt = function(i) list(status = "interrupted", error = "interrupted")
    )
    if (status$status == "success" && last$visible && !is.null(last$value)) {
      status$value <- tryCatch(to_plain(last$value), error = function(e) NULL)
      status$has_value <- TRUE
    }
    # What main.ts sends after the output: the pages the call's devices
    # wrote and the files under /output/ (after()).
    status$rich <- tryCatch(after(), error = function(e) character(), interrupt = function(i) character())
    status
  }

  # to_plain turns an R value into nested plain lists and atomic vectors
  # that main.ts writes as JSON (the forms docs/protocol.md lists).
  to_plain <- function(x, depth = 0L) {
    if (depth > 64L) return("<too deep>")
    if (is.null(x)) return(NULL)
    if (is.data.frame(x)) {
      cols <- lapply(x, function(col) to_plain(col, depth + 1L))
      n <- nrow(x)
      rows <- vector("list", n)
      for (i in seq_len(n)) {
        rows[[i]] <- lapply(cols, function(col) if (is.list(col)) col[[i]] else col[i])
      }
      return(rows)
    }
    if (is.factor(x)) return(keep_names(as.character(x), x))
    if (inherits(x, "Date")) return(keep_names(format(x, "%Y-%m-%d"), x))
    if (inherits(x, "POSIXt")) return(keep_names(format(as.POSIXct(x), "%Y-%m-%dT%H:%M:%SZ", tz = "UTC"), x))
    if (is.atomic(x)) {
      if (is.complex(x)) x <- keep_names(as.character(x), x)
      if (is.raw(x)) x <- keep_names(as.integer(x), x)
      if (is.matrix(x)) {
        return(lapply(seq_len(nrow(x)), function(i) to_plain(unname(x[i, ]), depth + 1L)))
      }
      return(keep_names(as.vector(unclass(x)), x))
    }
    if (is.list(x)) return(keep_names(lapply(unclass(x), to_plain, depth = depth + 1L), x))
    if (is.environment(x)) return(format(x))
    paste(deparse(x), collapse = "\n")
  }
  keep_names <- function(value, from) {
    names(value) <- names(from)
    value
  }

  # finish() closes every graphics device and returns the files they
  # wrote during the call, in order: list(path, mime).
  finish <- function() {
    if (!length(plots) && is.null(grDevices::dev.list())) return(list())
    graphics.off()
    out <- list()
    for (p in plots) {
      files <- if (grepl("%", p$pattern, fixed = TRUE)) {
        found <- character()
        for (i in seq_len(999L)) {
          f <- tryCatch(sprintf(p$pattern, i), error = function(e) "")
          if (!nzchar(f) || !file.exists(f)) break
          found <- c(found, f)
        }
        found
      } else {
        p$pattern[file.exists(p$pattern)]
      }
      for (f in unique(files)) {
        if (file.mtime(f) >= call_start - 1) out[[length(out) + 1L]] <- list(path = f, mime = p$mime)
      }
    }
    plots <<- list()
    out
  }

  # Removes pyrun's own plot files once main.ts has sent them.
  drop_plots <- function() {
    unlink(list.files(plot_dir, full.names = TRUE))
    invisible()
  }

  # Empties a folder, keeping the folder.
  clear_dir <- function(dir) {
    unlink(list.files(dir, all.files = TRUE, no.. = TRUE, full.names = TRUE), recursive = TRUE, force = TRUE)
    invisible()
  }

  make_parent <- function(path) {
    dir.create(dirname(path), recursive = TRUE, showWarnings = FALSE)
    invisible()
  }

  # The regular files under /output/ (paths relative to it) with a stamp
  # that changes when a file's bytes do: size and MD5. Not mtime: as R
  # reads it from webR's file system it sometimes differed for a file
  # nobody touched, which resent a session's earlier files.
  output_files <- function() {
    paths <- sort(list.files("/output", recursive = TRUE, all.files = TRUE))
    if (!length(paths)) return(list(path = character(), stamp = character()))
    info <- file.info(file.path("/output", paths))
    keep <- !info$isdir
    list(
      path = paths[keep],
      stamp = paste(info$size[keep], unname(tools::md5sum(file.path("/output", paths[keep]))))
    )
  }

  # before() readies the files of a call: /output/ emptied unless kept,
  # the parent folders of its input files made. With keep it returns the
  # stamps of the files /output/ holds, flat: path, stamp, path, stamp...
  before <- function(keep, parents = character()) {
    if (!keep) clear_dir("/output")
    for (d in parents) dir.create(d, recursive = TRUE, showWarnings = FALSE)
    if (!keep) return(character())
    flat_outputs()
  }

  flat_outputs <- function() {
    o <- output_files()
    as.character(rbind(o$path, o$stamp))
  }

  # after() closes the call's graphics devices and lists, flat, for
  # main.ts to read and send: the number of plot files the devices wrote,
  # then each as mime, path, then every file under /output/ as path, stamp.
  after <- function() {
    plots <- finish()
    c(
      as.character(length(plots)),
      unlist(lapply(plots, function(p) c(p$mime, p$path))),
      flat_outputs()
    )
  }

  # cleanup() ends a call: pyrun's plot files go; a stateless call's
  # traces go too (reset), and /output/ unless kept.
  cleanup <- function(keep, session) {
    flush_console()
    # A call interrupted outside run() did not close its devices.
    if (!is.null(grDevices::dev.list())) graphics.off()
    plots <<- list()
    drop_plots()
    if (!session) reset()
    if (!keep) clear_dir("/output")
    invisible()
  }

  # reset() undoes what a stateless call left: the global environment,
  # attached packages and environments, options, environment variables,
  # the working directory and the files in it and in /tmp (R's own
  # temporary folder stays, emptied).
  reset <- function() {
    setwd(baseline$wd)
    clear_dir(baseline$wd)
    keep_tmp <- normalizePath(tempdir())
    for (f in list.files("/tmp", all.files = TRUE, no.. = TRUE, full.names = TRUE)) {
      if (normalizePath(f) != keep_tmp) unlink(f, recursive = TRUE, force = TRUE)
    }
    clear_dir(keep_tmp)
    rm(list = ls(globalenv(), all.names = TRUE), envir = globalenv())
    for (name in setdiff(search(), baseline$search)) {
      try(detach(name, character.only = TRUE), silent = TRUE)
    }
    now <- options()
    extra <- setdiff(names(now), names(baseline$options))
    if (length(extra)) options(stats::setNames(rep(list(NULL), length(extra)), extra))
    options(baseline$options)
    if (env_dirty) {
      env <- Sys.getenv()
      unset_env(setdiff(names(env), names(baseline$env)))
      changed <- names(baseline$env)[baseline$env != env[names(baseline$env)] | is.na(env[names(baseline$env)])]
      if (length(changed)) do.call(set_env, as.list(baseline$env[changed]))
      env_dirty <<- FALSE
    }
    invisible()
  }

  pyrun
})
