// Every page of the panel. A new page is a module that calls registerPage() (router.ts), imported
// here; `nav` puts it in the top bar.
import "./signin";
import "./buckets";
import "./jobs";
import "./job_new";
import "./job_detail";
import "./apps";
import "./app_detail";
import "./playground";
import "./notebooks";
import "./billing";
import "./audit";
